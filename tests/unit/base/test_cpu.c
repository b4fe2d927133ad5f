/* tpu_cpu_has: the kernels' instruction-set choice (src/base/cpu.h) agrees with libgcc's own
 * probe (__builtin_cpu_supports, which this test may link: only the tpusim binary must not,
 * tests/cli/startup_probe.sh) on every feature it answers, and so does the cpuid probe that
 * builds against another C library use (tpu__cpu_probe). */
#include "base/cpu.h"
#include "check.h"

int main(void) {
#if defined(__x86_64__) && defined(__GNUC__)
  __builtin_cpu_init();
  CHECK_EQ_INT(tpu_cpu_has(TPU_CPU_AVX2), __builtin_cpu_supports("avx2") != 0);
  CHECK_EQ_INT(tpu_cpu_has(TPU_CPU_FMA), __builtin_cpu_supports("fma") != 0);
  CHECK_EQ_INT(tpu_cpu_has(TPU_CPU_AVX512F), __builtin_cpu_supports("avx512f") != 0);
  CHECK_EQ_INT(tpu_cpu_has(TPU_CPU_AVX512BW), __builtin_cpu_supports("avx512bw") != 0);
  /* the probe musl builds use, against the same */
  const unsigned p = tpu__cpu_probe();
  CHECK_EQ_INT((p >> 31) & 1, 1);
  CHECK_EQ_INT((p >> TPU_CPU_AVX2) & 1, __builtin_cpu_supports("avx2") != 0);
  CHECK_EQ_INT((p >> TPU_CPU_FMA) & 1, __builtin_cpu_supports("fma") != 0);
  CHECK_EQ_INT((p >> TPU_CPU_AVX512F) & 1, __builtin_cpu_supports("avx512f") != 0);
  CHECK_EQ_INT((p >> TPU_CPU_AVX512BW) & 1, __builtin_cpu_supports("avx512bw") != 0);
#else
  CHECK_EQ_INT(tpu_cpu_has(TPU_CPU_AVX2), 0);
#endif
  CHECK_EQ_INT(tpu_cpu_has(TPU_CPU_NFEATURES), 0);
  CHECK_DONE();
}
