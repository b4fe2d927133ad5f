/* `tpusim run` and `compile` read programs through this: Pallas kernels decoded first. */
#ifndef TPU_TOOLS_PALLAS_H
#define TPU_TOOLS_PALLAS_H

#include "ir/ir.h"

/* tpu_hlo_parse_file, except that a program holding Pallas kernels in Mosaic bytecode is
 * first decoded by python/tpusim/pallas_decode.py (python3 with jax; TPUSIM_PALLAS_DECODER
 * names another script). Without them the error says what to install. */
tpu_status tpu_cli_parse_program(const char *path, tpu_module **out, tpu_diag *d);

#endif
