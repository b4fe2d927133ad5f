/* What libtpusim_pjrt.so exports besides GetPjrtApi: the hooks its Python side
 * (python/jax_plugins/tpusim, python/tpusim/pjrt.py) calls through ctypes. */
#ifndef TPUSIM_PJRT_HOOKS_H
#define TPUSIM_PJRT_HOOKS_H
#include <stddef.h>
#include <stdint.h>

/* The program converter, called by PJRT_Client_Compile with the program as JAX gives it
 * (code, format "mlir") and the serialized CompileOptionsProto. It must answer, before it
 * returns, with tpusim_pjrt_compile_result or tpusim_pjrt_compile_error on `job`. */
typedef void (*tpu_pjrt_compiler_fn)(void *job, const void *code, size_t code_size, const char *format,
                                     const void *options, size_t options_size);
void tpusim_pjrt_set_compiler(tpu_pjrt_compiler_fn fn);

/* The converter's answer: HLO text, the signature (exec.c, parse_info: each parameter's and
 * result's global shape and the block every device holds), and the program returned by
 * PJRT_Executable_OptimizedProgram (format "mlir": StableHLO carrying the shardings the
 * plugin uses). All copied. 0, or -1 when out of memory. */
int tpusim_pjrt_compile_result(void *job, const char *hlo, const char *info, const void *program,
                               size_t program_size);
int tpusim_pjrt_compile_error(void *job, const char *msg);

/* Host callbacks (custom-call "xla_ffi_python_cpu_callback", see src/ref/ref.h for the hook's
 * contract): the function that runs callback number `id` on the operands' bytes and fills
 * the results' bytes. */
typedef int (*tpu_pjrt_host_callback_fn)(uint64_t id, int64_t device, int nin, void *const *in,
                                         const int64_t *in_bytes, int nout, void *const *out,
                                         const int64_t *out_bytes, char *err, int errlen);
void tpusim_pjrt_set_host_callback(tpu_pjrt_host_callback_fn fn);

/* Executions completed so far; the last one's program name into name (n bytes). */
int64_t tpusim_pjrt_last_run(char *name, size_t n);
/* The last execution's JSON report (what 0) or Chrome trace (what 1) to path; 0, or -1
 * with the message in err (n bytes). */
int tpusim_pjrt_last_write(int what, const char *path, char *err, size_t n);

#endif
