/* The eviction rule of memory-space assignment (vmem_assign.c mark_evictions): a compiled
 * program's matmul kernel whose result lies in VMEM (S(1)) and is read only by the program's
 * own copy-start to HBM writes on chip, as a kernel whose result stays in VMEM for another
 * kernel does; the copy is left out (the XLA TPU compiler's figure for it is none), and the
 * kernel reading the copy's result reads HBM. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "chip/chip.h"
#include "timing_util.h"

#define K_DOT \
    "%dotc (p: bf16[512,512], q: bf16[512,512]) -> bf16[512,512] {\n" \
    "  %p = bf16[512,512]{1,0:T(8,128)(2,1)} parameter(0)\n" \
    "  %q = bf16[512,512]{1,0:T(8,128)(2,1)} parameter(1)\n" \
    "  ROOT %d = bf16[512,512]{1,0:T(8,128)(2,1)S(1)} convolution(%p, %q), dim_labels=bf_io->bf\n" \
    "}\n" \
    "\n"

/* f0 = x . w into VMEM, taken to HBM by the program's copy; f1 = -(the copy) from HBM. */
static const char *k_evict =
    "HloModule evict\n"
    "\n"
    K_DOT
    "%negh (u: bf16[512,512]) -> bf16[512,512] {\n"
    "  %u = bf16[512,512]{1,0:T(8,128)(2,1)} parameter(0)\n"
    "  ROOT %n = bf16[512,512]{1,0:T(8,128)(2,1)} negate(%u)\n"
    "}\n"
    "\n"
    "ENTRY %main (x: bf16[512,512], w: bf16[512,512]) -> bf16[512,512] {\n"
    "  %x = bf16[512,512]{1,0:T(8,128)(2,1)} parameter(0)\n"
    "  %w = bf16[512,512]{1,0:T(8,128)(2,1)} parameter(1)\n"
    "  %f0 = bf16[512,512]{1,0:T(8,128)(2,1)S(1)} fusion(%x, %w), kind=kOutput, calls=%dotc\n"
    "  %cs = (bf16[512,512]{1,0:T(8,128)(2,1)}, bf16[512,512]{1,0:T(8,128)(2,1)S(1)}, u32[]{:S(2)}) copy-start(%f0)\n"
    "  %cd = bf16[512,512]{1,0:T(8,128)(2,1)} copy-done(%cs)\n"
    "  ROOT %f1 = bf16[512,512]{1,0:T(8,128)(2,1)} fusion(%cd), kind=kLoop, calls=%negh\n"
    "}\n";

/* The same f0 read in VMEM by f1 (kept there between the kernels). */
static const char *k_kept =
    "HloModule kept\n"
    "\n"
    K_DOT
    "%neg (u: bf16[512,512]) -> bf16[512,512] {\n"
    "  %u = bf16[512,512]{1,0:T(8,128)(2,1)S(1)} parameter(0)\n"
    "  ROOT %n = bf16[512,512]{1,0:T(8,128)(2,1)} negate(%u)\n"
    "}\n"
    "\n"
    "ENTRY %main (x: bf16[512,512], w: bf16[512,512]) -> bf16[512,512] {\n"
    "  %x = bf16[512,512]{1,0:T(8,128)(2,1)} parameter(0)\n"
    "  %w = bf16[512,512]{1,0:T(8,128)(2,1)} parameter(1)\n"
    "  %f0 = bf16[512,512]{1,0:T(8,128)(2,1)S(1)} fusion(%x, %w), kind=kOutput, calls=%dotc\n"
    "  ROOT %f1 = bf16[512,512]{1,0:T(8,128)(2,1)} fusion(%f0), kind=kLoop, calls=%neg\n"
    "}\n";

typedef struct {
  int64_t f0, f1;        /* the kernels' cycles */
  int f0_hbm_out;        /* f0's transfers to HBM */
  int f1_hbm_in;         /* f1's transfers from HBM */
} result;

static int run(const char *chipname, const char *src, result *r) {
  memset(r, 0, sizeof *r);
  r->f0 = r->f1 = -1;
  tpu_chip chip;
  tpu_diag d;
  if (tpu_chip_load(chipname, &chip, &d) != TPU_OK) return 0;
  tpu_program *p = compile_all_prec(src, &chip, 0);
  if (!p) return 0;
  int ok = 0;
  int f0 = -1, f1 = -1;
  for (int k = 0; k < p->nops; k++) {
    if (!strcmp(p->ops[k].name, "f0")) f0 = k;
    if (!strcmp(p->ops[k].name, "f1")) f1 = k;
  }
  for (int i = 0; i < p->ninsns; i++) {
    const tpu_insn *in = &p->insns[i];
    if (in->op == f0 && in->opc == TPU_ISA_DMA_OUT && !in->onchip) r->f0_hbm_out++;
    if (in->op == f1 && in->opc == TPU_ISA_DMA_IN && !in->onchip) r->f1_hbm_in++;
  }
  tpu_timeline tl;
  if (f0 >= 0 && f1 >= 0 && tpu_timing_run(p, &chip, 0, &tl, &d) == TPU_OK) {
    r->f0 = tl.ops[f0].cycles;
    r->f1 = tl.ops[f1].cycles;
    tpu_timeline_free(&tl);
    ok = 1;
  }
  tpu_program_free(p);
  return ok;
}

static void check_chip(const char *chipname) {
  result ev, kept;
  CHECK(run(chipname, k_evict, &ev));
  CHECK(run(chipname, k_kept, &kept));
  printf("%s: f0 %lld cycles evicted by the program's copy, %lld kept for a kernel; f1 %lld from HBM, %lld from VMEM\n",
         chipname, (long long)ev.f0, (long long)kept.f0, (long long)ev.f1, (long long)kept.f1);
  /* the evicted kernel writes on chip: no transfer of its own to HBM, the kept kernel's cycles */
  CHECK(ev.f0_hbm_out == 0);
  CHECK(kept.f0_hbm_out == 0);
  CHECK(ev.f0 > 0 && ev.f0 == kept.f0);
  /* its reader, through the copy, reads HBM */
  CHECK(ev.f1_hbm_in > 0);
  CHECK(kept.f1_hbm_in == 0);
}

int main(void) {
  check_chip("v6e");
  check_chip("v5e");
  CHECK_DONE();
}
