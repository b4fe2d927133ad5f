/* The resident-kernel rule of the timing executor (timing.c resident_cycles): a compiled
 * program's vector kernel whose operands and result all stay in VMEM, with no transfer in its
 * program, pays the per-element stream costs (xbytes) and vmem_read_cost of its operand bytes
 * at the HBM stream rate, as on-chip transfers of the same bytes would, its vector work
 * overlapping the stream costs (port_floor_op: start, reads, then the larger of the stream
 * costs and the vector work): against a closed form
 * on v5e (vmem_read_cost 1.0) and v6e (0.2); also when the kernel reads a parameter the step
 * copies into VMEM itself (copy-start / copy-done), which is no transfer of its own. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "check.h"
#include "chip/chip.h"
#include "chip/program.h"
#include "chip/timing.h"
#include "compile/compile.h"
#include "hlo/hlo.h"
#include "ir/layout.h"
#include "ir/verify.h"

/* The computations both programs share: the reduce's sum, f0's negate into VMEM, f2's square. */
#define K_ADD_NEG \
    "%add (a: f32[], b: f32[]) -> f32[] {\n" \
    "  %a = f32[] parameter(0)\n" \
    "  %b = f32[] parameter(1)\n" \
    "  ROOT %s = f32[] add(%a, %b)\n" \
    "}\n" \
    "\n" \
    "%neg (q: bf16[8,128,768]) -> bf16[8,128,768] {\n" \
    "  %q = bf16[8,128,768]{2,1,0:T(8,128)(2,1)} parameter(0)\n" \
    "  ROOT %n = bf16[8,128,768]{2,1,0:T(8,128)(2,1)S(1)} negate(%q)\n" \
    "}\n" \
    "\n"
#define K_SQ \
    "%sq (u: f32[8,128]) -> f32[8,128] {\n" \
    "  %u = f32[8,128]{1,0:T(8,128)S(1)} parameter(0)\n" \
    "  ROOT %m = f32[8,128]{1,0:T(8,128)} multiply(%u, %u)\n" \
    "}\n" \
    "\n"

/* f0 = -x into VMEM; f1 = sum over the last dimension of f0, read where f0 left it, into
 * VMEM; f2 = f1 * f1 back to HBM. */
static const char *k_src =
    "HloModule resident\n"
    "\n"
    K_ADD_NEG
    "%sum (p: bf16[8,128,768]) -> f32[8,128] {\n"
    "  %p = bf16[8,128,768]{2,1,0:T(8,128)(2,1)S(1)} parameter(0)\n"
    "  %c = f32[8,128,768]{2,1,0:T(8,128)} convert(%p)\n"
    "  %z = f32[]{:T(128)} constant(0)\n"
    "  ROOT %r = f32[8,128]{1,0:T(8,128)S(1)} reduce(%c, %z), dimensions={2}, to_apply=%add\n"
    "}\n"
    "\n"
    K_SQ
    "ENTRY %main (x: bf16[8,128,768]) -> f32[8,128] {\n"
    "  %x = bf16[8,128,768]{2,1,0:T(8,128)(2,1)} parameter(0)\n"
    "  %f0 = bf16[8,128,768]{2,1,0:T(8,128)(2,1)S(1)} fusion(%x), kind=kLoop, calls=%neg\n"
    "  %f1 = f32[8,128]{1,0:T(8,128)S(1)} fusion(%f0), kind=kLoop, calls=%sum\n"
    "  ROOT %f2 = f32[8,128]{1,0:T(8,128)} fusion(%f1), kind=kLoop, calls=%sq\n"
    "}\n";

/* The same, with f1 also reading a f32[768] scale parameter the program copies into VMEM in
 * the step (copy-start / copy-done into S(1)): f1 reads nothing from HBM itself, so it is
 * resident too and pays its whole stream costs (lower.c lower_stream on_chip), not a share
 * spread over the scale's few bytes (libtpu v5e: f32[32,128,512] kept in VMEM times a
 * f32[512] scale, 23,565 cycles with a constant scale, 23,569 copied in from a parameter). */
static const char *k_scaled =
    "HloModule resident_scaled\n"
    "\n"
    K_ADD_NEG
    "%sum (p: bf16[8,128,768], v: f32[768]) -> f32[8,128] {\n"
    "  %p = bf16[8,128,768]{2,1,0:T(8,128)(2,1)S(1)} parameter(0)\n"
    "  %v = f32[768]{0:T(1024)S(1)} parameter(1)\n"
    "  %c = f32[8,128,768]{2,1,0:T(8,128)} convert(%p)\n"
    "  %b = f32[8,128,768]{2,1,0:T(8,128)} broadcast(%v), dimensions={2}\n"
    "  %m = f32[8,128,768]{2,1,0:T(8,128)} multiply(%c, %b)\n"
    "  %z = f32[]{:T(128)} constant(0)\n"
    "  ROOT %r = f32[8,128]{1,0:T(8,128)S(1)} reduce(%m, %z), dimensions={2}, to_apply=%add\n"
    "}\n"
    "\n"
    K_SQ
    "ENTRY %main (x: bf16[8,128,768], s: f32[768]) -> f32[8,128] {\n"
    "  %x = bf16[8,128,768]{2,1,0:T(8,128)(2,1)} parameter(0)\n"
    "  %s = f32[768]{0:T(1024)} parameter(1)\n"
    "  %cs = (f32[768]{0:T(1024)S(1)}, f32[768]{0:T(1024)}, u32[]{:S(2)}) copy-start(%s)\n"
    "  %f0 = bf16[8,128,768]{2,1,0:T(8,128)(2,1)S(1)} fusion(%x), kind=kLoop, calls=%neg\n"
    "  %cd = f32[768]{0:T(1024)S(1)} copy-done(%cs)\n"
    "  %f1 = f32[8,128]{1,0:T(8,128)S(1)} fusion(%f0, %cd), kind=kLoop, calls=%sum\n"
    "  ROOT %f2 = f32[8,128]{1,0:T(8,128)} fusion(%f1), kind=kLoop, calls=%sq\n"
    "}\n";

static int64_t op_cycles(const tpu_program *p, const tpu_chip *chip, int op) {
  tpu_timeline tl;
  tpu_diag d;
  if (tpu_timing_run(p, chip, 0, &tl, &d) != TPU_OK) return -1;
  int64_t c = tl.ops[op].cycles;
  tpu_timeline_free(&tl);
  return c;
}

static void check_chip(const char *name, const char *src) {
  tpu_chip chip;
  tpu_diag d;
  CHECK(tpu_chip_load(name, &chip, &d) == TPU_OK);
  tpu_module *m = NULL;
  CHECK(tpu_hlo_parse("resident.hlo", src, strlen(src), &m, &d) == TPU_OK && tpu_ir_verify(m, &d) == TPU_OK);
  if (!m) return;
  tpu_compile_opts o;
  memset(&o, 0, sizeof o);
  o.chip = &chip;
  tpu_program *p = NULL;
  CHECK(tpu_compile(m, &o, &p, &d) == TPU_OK);
  if (!p) {
    tpu_module_free(m);
    return;
  }
  int f1 = -1;
  for (int k = 0; k < p->nops; k++)
    if (!strcmp(p->ops[k].name, "f1")) f1 = k;
  CHECK(f1 >= 0);
  if (f1 < 0) return;
  /* the premise: f1 has vector work and no transfer */
  int vec = 0, xfer = 0;
  for (int i = 0; i < p->ninsns; i++) {
    const tpu_insn *in = &p->insns[i];
    if (in->op != f1) continue;
    vec += in->opc == TPU_ISA_VPU || in->opc == TPU_ISA_XLU;
    xfer += in->opc == TPU_ISA_DMA_IN || in->opc == TPU_ISA_DMA_OUT || in->opc == TPU_ISA_DMA_HBM;
  }
  CHECK(vec > 0 && xfer == 0);
  const tpu_prog_op *po = &p->ops[f1];
  const double bpc = tpu_chip_hbm_stream_bw(&chip) / chip.clock_hz;
  const double out = 8 * 128 * 4; /* f32[8,128] in its (8,128) tile */
  const int64_t want = (int64_t)ceil((po->xbytes + chip.vmem_read_cost * (po->bytes - out)) / bpc);
  CHECK(po->xbytes > 0 && want > 3000);
  int64_t with = op_cycles(p, &chip, f1);
  /* the assembled text carries what the rule reads: the same cycles parsed back */
  CHECK(po->out_bytes == out);
  char *text = tpu_program_text(p);
  tpu_program *q = NULL;
  CHECK(text && tpu_program_parse("resident.tasm", text, strlen(text), &q, &d) == TPU_OK);
  if (q) CHECK(op_cycles(q, &chip, f1) == with);
  tpu_program_free(q);
  tpu_free(text);
  /* the same program without the stream costs or the VMEM read share: the kernel's start and
   * vector work; and without the vector work too: its start alone */
  const double xb = po->xbytes;
  tpu_chip plain = chip;
  p->ops[f1].xbytes = 0;
  plain.vmem_read_cost = 0;
  int64_t without = op_cycles(p, &plain, f1);
  for (int i = 0; i < p->ninsns; i++)
    if (p->insns[i].op == f1 && (p->insns[i].opc == TPU_ISA_VPU || p->insns[i].opc == TPU_ISA_EUP ||
                                 p->insns[i].opc == TPU_ISA_XLU))
      p->insns[i].vregs = 0;
  int64_t start = op_cycles(p, &plain, f1);
  p->ops[f1].xbytes = xb;
  printf("%s: f1 %lld cycles, %lld without the resident reads, %lld its start (closed form %lld)\n", name,
         (long long)with, (long long)without, (long long)start, (long long)want);
  CHECK(with > 0 && without > start && start > 0);
  /* its reads from VMEM come first; its vector work overlaps its per-element stream costs
   * (the XLA TPU compiler's softmax kernels over scores kept in VMEM, timing.c
   * port_floor_op): the premise, the stream costs outweigh the vector work */
  const int64_t reads = (int64_t)ceil(chip.vmem_read_cost * (po->bytes - out) / bpc);
  const int64_t pass = (int64_t)ceil(xb / bpc), work = without - start;
  CHECK(pass > work && work > 0);
  CHECK(llabs(with - start - reads - pass) <= 1);
  tpu_program_free(p);
  tpu_module_free(m);
}

/* f0 = x . w with its bf16 result in VMEM (S(1)), read there by f1 = -f0; with `hbm` the
 * result goes to HBM instead. */
static const char *k_mm =
    "HloModule mm\n"
    "\n"
    "%dotc (p: bf16[512,512], q: bf16[512,512]) -> bf16[512,512] {\n"
    "  %p = bf16[512,512]{1,0:T(8,128)(2,1)} parameter(0)\n"
    "  %q = bf16[512,512]{1,0:T(8,128)(2,1)} parameter(1)\n"
    "  ROOT %d = bf16[512,512]{1,0:T(8,128)(2,1)S(1)} convolution(%p, %q), dim_labels=bf_io->bf\n"
    "}\n"
    "\n"
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

/* f0's DMA-out cycles on `chip`, its result in VMEM or (hbm) in HBM; *full: the whole pass
 * (out_scale x its bytes at the stream rate), *bytes: its bytes alone. */
static int64_t mm_out_cycles(const char *chipname, int hbm, double *full, double *bytes) {
  tpu_chip chip;
  tpu_diag d;
  if (tpu_chip_load(chipname, &chip, &d) != TPU_OK) return -1;
  char src[4096];
  snprintf(src, sizeof src, "%s", k_mm);
  if (hbm) /* f0's result and f1's operand in HBM */
    for (char *q = strstr(src, "(2,1)S(1)}"); q; q = strstr(q, "(2,1)S(1)}")) memcpy(q + 5, "}    ", 5);
  tpu_module *m = NULL;
  if (tpu_hlo_parse("mm.hlo", src, strlen(src), &m, &d) != TPU_OK || tpu_ir_verify(m, &d) != TPU_OK) {
    tpu_module_free(m);
    return -1;
  }
  tpu_compile_opts o;
  memset(&o, 0, sizeof o);
  o.chip = &chip;
  tpu_program *p = NULL;
  int64_t c = -1;
  if (tpu_compile(m, &o, &p, &d) == TPU_OK && p->ops[0].out_scale > 1) {
    tpu_timeline tl;
    if (tpu_timing_run(p, &chip, 0, &tl, &d) == TPU_OK) {
      c = tl.ops[0].unit_cycles[TPU_UNIT_DMA_OUT];
      *bytes = p->ops[0].out_bytes / (tpu_chip_hbm_stream_bw(&chip) / chip.clock_hz);
      *full = p->ops[0].out_scale * *bytes;
      tpu_timeline_free(&tl);
    }
  }
  tpu_program_free(p);
  tpu_module_free(m);
  return c;
}

static void check_result_pass(void) {
  double full = 0, b = 0, full2 = 0, b2 = 0;
  int64_t vm = mm_out_cycles("v6e", 0, &full, &b), hb = mm_out_cycles("v6e", 1, &full2, &b2);
  printf("v6e bf16 matmul result: %lld DMA-out cycles kept in VMEM, %lld to HBM (the whole pass %.0f)\n",
         (long long)vm, (long long)hb, full2);
  CHECK(vm == 0);
  CHECK(full2 > 500 && llabs(hb - (int64_t)full2) <= 2);
  int64_t vm5 = mm_out_cycles("v5e", 0, &full, &b);
  printf("v5e bf16 matmul result kept in VMEM: %lld DMA-out cycles (its pass beyond the bytes %.0f)\n", (long long)vm5,
         full - b);
  CHECK(full - b > 500 && llabs(vm5 - (int64_t)(full - b)) <= 2);
}

int main(void) {
  check_result_pass();
  check_chip("v5e", k_src);
  check_chip("v6e", k_src);
  check_chip("v5e", k_scaled);
  check_chip("v6e", k_scaled);
  CHECK_DONE();
}
