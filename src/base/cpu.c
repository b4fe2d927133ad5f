#include "base/cpu.h"

#include <limits.h> /* defines __GLIBC__ where the C library is glibc */

#if defined(__x86_64__) && defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 33)) && \
    defined(__has_include)
#if __has_include(<sys/platform/x86.h>)
#include <sys/platform/x86.h>
#define TPU_CPU_GLIBC 1
#endif
#endif

#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#include <stdatomic.h>

unsigned tpu__cpu_probe(void) {
  unsigned a, b, c, d, bits = 1u << 31; /* probed */
  const unsigned max = __get_cpuid_max(0, 0); /* three cpuid in all: leaves 0, 1 and 7 */
  if (max < 1) return bits;
  __cpuid(1, a, b, c, d);
  const int osxsave = (c >> 27) & 1, fma = (c >> 12) & 1, avx = (c >> 28) & 1;
  unsigned xcr0 = 0;
  if (osxsave) {
    unsigned lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    xcr0 = lo;
  }
  const int ymm = (xcr0 & 6) == 6, zmm = ymm && (xcr0 & 0xe0) == 0xe0;
  unsigned b7 = 0;
  if (max >= 7) {
    __cpuid_count(7, 0, a, b, c, d);
    b7 = b;
  }
  if (ymm && avx && ((b7 >> 5) & 1)) bits |= 1u << TPU_CPU_AVX2;
  if (ymm && avx && fma) bits |= 1u << TPU_CPU_FMA;
  if (zmm && ((b7 >> 16) & 1)) bits |= 1u << TPU_CPU_AVX512F;
  if (zmm && ((b7 >> 16) & 1) && ((b7 >> 30) & 1)) bits |= 1u << TPU_CPU_AVX512BW;
  return bits;
}
#else
unsigned tpu__cpu_probe(void) { return 1u << 31; }
#endif

#if defined(TPU_CPU_GLIBC)
int tpu_cpu_has(tpu_cpu_feature f) {
  switch (f) {
    case TPU_CPU_AVX2: return CPU_FEATURE_ACTIVE(AVX2) != 0;
    case TPU_CPU_FMA: return CPU_FEATURE_ACTIVE(FMA) != 0;
    case TPU_CPU_AVX512F: return CPU_FEATURE_ACTIVE(AVX512F) != 0;
    case TPU_CPU_AVX512BW: return CPU_FEATURE_ACTIVE(AVX512BW) != 0;
    default: return 0;
  }
}
#elif defined(__x86_64__) && defined(__GNUC__)
/* Another C library (musl: the static CLI of TPU_MUSL_CLI) keeps no detection of its own:
 * probe on the first question only, never at start-up. */
int tpu_cpu_has(tpu_cpu_feature f) {
  static _Atomic unsigned cached; /* 0 until detected; threads racing detect the same bits */
  unsigned bits = atomic_load_explicit(&cached, memory_order_relaxed);
  if (!bits) atomic_store_explicit(&cached, bits = tpu__cpu_probe(), memory_order_relaxed);
  return (unsigned)f < TPU_CPU_NFEATURES && ((bits >> f) & 1);
}
#else
int tpu_cpu_has(tpu_cpu_feature f) {
  (void)f;
  return 0;
}
#endif
