/* The CPU's instruction-set features, for the kernels that choose a code path by them. */
#ifndef TPU_BASE_CPU_H
#define TPU_BASE_CPU_H

typedef enum { TPU_CPU_AVX2, TPU_CPU_FMA, TPU_CPU_AVX512F, TPU_CPU_AVX512BW, TPU_CPU_NFEATURES } tpu_cpu_feature;

/* 1 when the CPU has the feature and the OS saves its registers, else 0. With glibc 2.33
 * or later this reads the features the C library detected when the process started
 * (<sys/platform/x86.h>): no cpuid of its own. __builtin_cpu_supports would link libgcc's
 * feature probe, a constructor that runs 10 cpuid at every start; in a virtual machine each
 * one traps to the hypervisor (5-20 us here), a tenth of an empty `tpusim` process. With
 * another C library (musl) this probes once, at the first call (tpu__cpu_probe). */
int tpu_cpu_has(tpu_cpu_feature f);

/* The features by cpuid and xgetbv (3 cpuid): bit f set when tpu_cpu_has(f) would be, bit 31
 * always. What tpu_cpu_has asks, once, where the C library is not glibc 2.33 or later. */
unsigned tpu__cpu_probe(void);

#endif
