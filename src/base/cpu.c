#include "base/cpu.h"

#include <limits.h> /* defines __GLIBC__ where the C library is glibc */

#if defined(__x86_64__) && defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 33)) && \
    defined(__has_include)
#if __has_include(<sys/platform/x86.h>)
#include <sys/platform/x86.h>
#define TPU_CPU_GLIBC 1
#endif
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
int tpu_cpu_has(tpu_cpu_feature f) {
  switch (f) {
    case TPU_CPU_AVX2: return __builtin_cpu_supports("avx2");
    case TPU_CPU_FMA: return __builtin_cpu_supports("fma");
    case TPU_CPU_AVX512F: return __builtin_cpu_supports("avx512f");
    case TPU_CPU_AVX512BW: return __builtin_cpu_supports("avx512bw");
    default: return 0;
  }
}
#else
int tpu_cpu_has(tpu_cpu_feature f) {
  (void)f;
  return 0;
}
#endif
