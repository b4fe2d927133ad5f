/* Data movement the XLA TPU compiler runs in kernels of its own (through tpu_compile_hlo on
 * v5e): a reshape of a transpose that no layouts make a bitcast (compile/passes/
 * reshape_relayout.c) is a copy kernel holding the data movement only, before the dot that
 * reads it, where a head split stays in the dot's kernel; a value static slices read beside
 * other users (a roll) is stored once and sliced by bare slices (fuse.c shared_cheap). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "compile/compile.h"
#include "hlo/hlo.h"
#include "passes_util.h"

static int count_op(const tpu_comp *c, tpu_opcode op) {
  int n = 0;
  for (int j = 0; j < c->ninstrs; j++) n += c->instrs[j]->op == op;
  return n;
}

/* The kernel (entry fusion or bare op) holding opcode op, or NULL. */
static const tpu_instr *kernel_with(const tpu_module *m, tpu_opcode op) {
  for (int j = 0; j < m->entry->ninstrs; j++) {
    const tpu_instr *in = m->entry->instrs[j];
    if (in->op == op || (in->op == TPU_OP_FUSION && in->calls && count_op(in->calls, op))) return in;
  }
  return NULL;
}

/* x [4,28,28,192] (scaled by itself first when `norm`) split into 7x7 windows,
 * [4,4,7,4,7,192] transposed to [4,4,4,7,7,192] and merged to [64,49,192], times w: the
 * XLA TPU compiler (libtpu, v5e) runs a `copy` into the windows' layout and the dot's kOutput
 * fusion after it; with the scaling before, that is a kLoop fusion of its own before the copy. */
static void test_window_partition(void) {
  for (int norm = 0; norm < 2; norm++) {
    char src[1536];
    snprintf(src, sizeof src,
             "HloModule m\nENTRY e {\n x = bf16[4,28,28,192]{3,2,1,0} parameter(0)\n w = bf16[192,192]{1,0} parameter(1)\n"
             " y = bf16[4,28,28,192] %s\n r = bf16[4,4,7,4,7,192] reshape(y)\n"
             " t = bf16[4,4,4,7,7,192] transpose(r), dimensions={0,1,3,2,4,5}\n q = bf16[64,49,192] reshape(t)\n"
             " ROOT d = bf16[64,49,192] dot(q, w), lhs_contracting_dims={2}, rhs_contracting_dims={0}\n}\n",
             norm ? "multiply(x, x)" : "copy(x)");
    tpu_module *m = compile_src(src);
    if (!m) continue;
    const tpu_instr *mm = kernel_with(m, TPU_OP_DOT), *tk = kernel_with(m, TPU_OP_TRANSPOSE);
    CHECK(mm != NULL && tk != NULL);
    if (mm && tk) {
      printf("window partition%s: the transpose %s the dot's kernel\n", norm ? " after a scaling" : "",
             mm == tk ? "in" : "before");
      CHECK(mm != tk);
      CHECK(tk->op == TPU_OP_FUSION && tk->calls->root->op == TPU_OP_RESHAPE);
      /* the copy kernel moves data only: the scaling is a kernel of its own */
      if (tk->op == TPU_OP_FUSION) CHECK_EQ_INT(count_op(tk->calls, TPU_OP_MULTIPLY), 0);
      if (norm) CHECK(kernel_with(m, TPU_OP_MULTIPLY) != NULL && kernel_with(m, TPU_OP_MULTIPLY) != mm);
    }
    tpu_module_free(m);
  }
}

/* Attention's head split, [8,128,768] -> [8,128,12,64] -> transpose(0,2,1,3) -> [96,128,64],
 * is a bitcast for some layouts of both sides: the dot's kernel reads it in place. */
static void test_head_split(void) {
  const char *src =
      "HloModule m\nENTRY e {\n x = bf16[8,128,768]{2,1,0} parameter(0)\n w = bf16[96,64,128]{2,1,0} parameter(1)\n"
      " r = bf16[8,128,12,64] reshape(x)\n t = bf16[8,12,128,64] transpose(r), dimensions={0,2,1,3}\n"
      " q = bf16[96,128,64] reshape(t)\n"
      " ROOT d = bf16[96,128,128] dot(q, w), lhs_batch_dims={0}, lhs_contracting_dims={2}, rhs_batch_dims={0},"
      " rhs_contracting_dims={1}\n}\n";
  tpu_module *m = compile_src(src);
  if (!m) return;
  const tpu_instr *mm = kernel_with(m, TPU_OP_DOT), *tk = kernel_with(m, TPU_OP_TRANSPOSE);
  printf("head split: the transpose %s the dot's kernel\n", mm && mm == tk ? "in" : "not in");
  CHECK(mm != NULL && mm == tk);
  tpu_module_free(m);
}

/* x*x+x of bf16[4,28,28,192] rolled by 3 along dimension 1 (two slices and their
 * concatenation): the compiler's multiply_add_fusion, a bare `slice`, the concatenation
 * (libtpu v5e); one slice alone takes x*x+x into its kernel. */
static void test_roll_slices(void) {
  for (int roll = 0; roll < 2; roll++) {
    char src[1024];
    snprintf(src, sizeof src,
             "HloModule m\nENTRY e {\n x = bf16[4,28,28,192]{3,2,1,0} parameter(0)\n m = bf16[4,28,28,192] multiply(x, x)\n"
             " y = bf16[4,28,28,192] add(m, x)\n a = bf16[4,25,28,192] slice(y), slice={[0:4], [3:28], [0:28], [0:192]}\n%s}\n",
             roll ? " b = bf16[4,3,28,192] slice(y), slice={[0:4], [0:3], [0:28], [0:192]}\n"
                    " ROOT c = bf16[4,28,28,192] concatenate(a, b), dimensions={1}\n"
                  : " ROOT n = bf16[4,25,28,192] negate(a)\n");
    tpu_module *m = compile_src(src);
    if (!m) continue;
    int muls = 0, bare = 0;
    for (int j = 0; j < m->entry->ninstrs; j++) {
      const tpu_instr *in = m->entry->instrs[j];
      if (in->op == TPU_OP_FUSION) muls += count_op(in->calls, TPU_OP_MULTIPLY);
      bare += in->op == TPU_OP_SLICE;
    }
    printf("%s: x*x+x computed in %d kernel(s), %d bare slice(s)\n", roll ? "roll" : "one slice", muls, bare);
    CHECK_EQ_INT(muls, 1);
    CHECK_EQ_INT(bare, roll ? 1 : 0);
    tpu_module_free(m);
  }
}

int main(void) {
  tpu_diag d;
  CHECK(tpu_chip_load("v5e", &g_chip, &d) == TPU_OK);
  test_window_partition();
  test_head_split();
  test_roll_slices();
  CHECK_DONE();
}
