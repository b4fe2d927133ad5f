/* A batch norm's statistics after a grouped convolution (compile/passes/group_conv.c,
 * fuse_merge.c conv_column_sums, backend layout.c / tile.c): the mean's sum is an extra
 * output of the convolution's kernel, and the variance's kernel computes on the split
 * registers in the convolution's layout, Cog of the lanes, the batch in the sublanes,
 * paying for every padded tile as the XLA TPU compiler's multiply_reduce_fusion does
 * (resnext_fwd_b8_28x28x512_g32 on v5e: f32[8,28,28,32,8]{4,0,3,2,1:T(8,128)}, 365,408
 * cycles, 14.6 per register; the same statistics over the ungrouped [8,28,28,256], 14.9). */
#include <stdio.h>
#include <string.h>

#include "util.h"
#include "unit/compile/backend_util.h"

/* bf16[8,14,14,64] in 8 groups of 8 input features (Cog = 8 of the 128 lanes), then its
 * per-channel mean and variance, as JAX's batch norm writes them. */
static const char *k_src =
    "HloModule m\nadd {\n a = f32[] parameter(0)\n b = f32[] parameter(1)\n ROOT s = f32[] add(a, b)\n}\n"
    "ENTRY e {\n x = bf16[8,14,14,64] parameter(0)\n w = bf16[3,3,8,64] parameter(1)\n"
    " c = bf16[8,14,14,64] convolution(x, w), window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01io->b01f,"
    " feature_group_count=8\n"
    " cf = f32[8,14,14,64] convert(c)\n z = f32[] constant(0)\n"
    " s = f32[64] reduce(cf, z), dimensions={0,1,2}, to_apply=add\n"
    " n = f32[] constant(1568)\n nb = f32[64] broadcast(n), dimensions={}\n"
    " mean = f32[64] divide(s, nb)\n mb = f32[8,14,14,64] broadcast(mean), dimensions={3}\n"
    " d = f32[8,14,14,64] subtract(cf, mb)\n q = f32[8,14,14,64] multiply(d, d)\n"
    " v = f32[64] reduce(q, z), dimensions={0,1,2}, to_apply=add\n"
    " ROOT o = (f32[64], f32[64], bf16[8,14,14,64]) tuple(s, v, c)\n}\n";

static int has_op(const tpu_instr *f, tpu_opcode op) {
  for (int k = 0; f->op == TPU_OP_FUSION && f->calls && k < f->calls->ninstrs; k++)
    if (f->calls->instrs[k]->op == op) return 1;
  return 0;
}

/* The convolution's kernel takes the mean's sum (a multi-output kernel whose convolution
 * leaf is still the split [14,14,8,8,8]); the variance's kernel reads that leaf and its
 * values keep the convolution's layout. */
static void test_group_stats_kernels(const tpu_module *m) {
  const tpu_instr *conv = NULL, *var = NULL;
  for (int j = 0; j < m->entry->ninstrs; j++) {
    const tpu_instr *in = m->entry->instrs[j];
    if (has_op(in, TPU_OP_CONVOLUTION)) conv = in;
    else if (has_op(in, TPU_OP_REDUCE) && in->noperands > 0 && in->operands[0]->shape.rank == 5) var = in;
  }
  CHECK(conv != NULL && var != NULL);
  if (conv) {
    int split_leaf = 0;
    for (int l = 0; conv->shape.dtype == TPU_TUPLE && l < conv->shape.ntuple; l++)
      split_leaf |= conv->shape.elems[l].rank == 5;
    printf("grouped convolution's kernel: %d results, the split one %s, the mean's sum %s\n",
           conv->shape.dtype == TPU_TUPLE ? conv->shape.ntuple : 1, split_leaf ? "kept" : "missing",
           has_op(conv, TPU_OP_REDUCE) ? "inside" : "apart");
    CHECK(conv->shape.dtype == TPU_TUPLE && split_leaf && has_op(conv, TPU_OP_REDUCE));
  }
  if (var) {
    const tpu_instr *r = NULL;
    for (int k = 0; k < var->calls->ninstrs; k++)
      if (var->calls->instrs[k]->op == TPU_OP_REDUCE) r = var->calls->instrs[k];
    const tpu_shape *qs = r ? &r->operands[0]->shape : NULL;
    CHECK(qs && qs->rank == 5 && qs->has_layout);
    /* [B, H, W, G, Cog]: Cog in the lanes, the batch in the sublanes */
    if (qs && qs->has_layout) CHECK(qs->minor_to_major[0] == 4 && qs->minor_to_major[1] == 0);
  }
}

/* The variance kernel's stream pass counts the padded tiles of its split registers: 8 of
 * 128 lanes, 16 times its 100,352 elements. */
static void test_group_stats_tiles(const tpu_program *p, const tpu_chip *cp) {
  const tpu_chip c = *cp;
  const double elems = 8.0 * 14 * 14 * 64, tiled = 8.0 * 14 * 14 * 8 * 128;
  double x = -1, flops = 0, padded = 0;
  for (int i = 0; i < p->nops; i++)
    if (p->ops[i].kind && strstr(p->ops[i].kind, "kInput") && p->ops[i].xbytes > x) {
      x = p->ops[i].xbytes;
      flops = p->ops[i].flops;
      padded = p->ops[i].padded_flops;
    }
  printf("variance of the split registers on v5e: xbytes %.0f (stream pass over the padded tiles %.0f, over the "
         "elements %.0f); vector work %.0f padded of %.0f\n",
         x, c.stream_pass_bytes * tiled, c.stream_pass_bytes * elems, padded, flops);
  CHECK(c.stream_pass_bytes > 0);
  CHECK_NEAR(x, c.stream_pass_bytes * tiled, 1);
  /* its registers as the lanes hold them: 16 times the work (the least padded layout, 4) */
  CHECK(flops > 0 && padded >= 15 * flops);
}

int main(void) {
  tpu_chip c;
  tpu_module *m = NULL;
  tpu_program *p = compile_for_with("v5e", k_src, 1, &c, &m);
  if (p && m) {
    test_group_stats_kernels(m);
    test_group_stats_tiles(p, &c);
  }
  tpu_program_free(p);
  tpu_module_free(m);
  CHECK_DONE();
}
