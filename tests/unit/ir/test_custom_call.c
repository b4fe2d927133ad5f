/* custom-call targets: the bookkeeping ones JAX and XLA emit run as the identity on both
 * backends; XLA CPU's TopK is top-k (descending, ties to the lower index); anything else
 * is refused naming the target and the backend, with the reason for LAPACK calls. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "chip/chip.h"
#include "chip/exec.h"
#include "compile/compile.h"
#include "chip/program.h"
#include "hlo/hlo.h"
#include "ir/verify.h"
#include "pod/cost.h"
#include "ref/ref.h"

static tpu_chip g_chip;

/* Runs src on both backends with x; values to outs[0] (ref) and outs[1] (tpu); compile
 * status to *cst and its message to cmsg. */
static tpu_status both(const char *src, const tpu_tensor *x, tpu_tensor *outs, tpu_status *cst, char *cmsg) {
  tpu_module *m = NULL;
  tpu_diag d;
  memset(outs, 0, 2 * sizeof *outs);
  tpu_status st = tpu_hlo_parse("t.hlo", src, strlen(src), &m, &d);
  if (st == TPU_OK) st = tpu_ir_verify(m, &d);
  if (st == TPU_OK) st = tpu_ref_run(m, x, 1, &outs[0], &d);
  if (st == TPU_OK) st = tpu_chip_run_values(m, &g_chip, -1, x, 1, &outs[1], &d);
  if (st != TPU_OK) snprintf(cmsg, 768, "%s", d.msg);
  if (st == TPU_OK) {
    tpu_pod_cost_ctx pc;
    memset(&pc, 0, sizeof pc);
    pc.chip = &g_chip;
    tpu_compile_opts o = {&g_chip, NULL, NULL, -1, tpu_pod_coll_cost, &pc, 0, 0, NULL, NULL, tpu_pod_hops, NULL};
    tpu_program *p = NULL;
    *cst = tpu_compile(m, &o, &p, &d);
    snprintf(cmsg, 768, "%s", *cst == TPU_OK ? "" : d.msg);
    tpu_program_free(p);
    tpu_pod_cost_free(&pc);
  }
  tpu_module_free(m);
  return st;
}

int main(void) {
  tpu_diag d;
  if (tpu_chip_load("v5e", &g_chip, &d) != TPU_OK) return 1;
  int64_t dims[2] = {2, 5};
  tpu_tensor x, outs[2];
  tpu_tensor_alloc(&x, TPU_F32, 2, dims, &d);
  const double v[10] = {3, 1, 4, 1, 5, 9, 2, 6, 5, 3};
  for (int i = 0; i < 10; i++) tpu_tensor_set_f64(&x, i, v[i]);
  char msg[768];
  tpu_status cst = TPU_ERR_INVALID;
  const char *targets[] = {"Sharding", "SPMDFullToShardShape", "SPMDShardToFullShape", "annotate_device_placement",
                           "MoveToHost", "MoveToDevice", "AssumeGatherIndicesInBound", "xla.sdy.FuncResultSharding",
                           "xla.sdy.GlobalToLocalShape", "xla.sdy.LocalToGlobalShape", "xla.sdy.ShardingGroup",
                           "LayoutConstraint"};
  for (size_t t = 0; t < sizeof targets / sizeof targets[0]; t++) {
    char src[512];
    snprintf(src, sizeof src,
             "HloModule m\nENTRY e {\n p = f32[2,5] parameter(0)\n c = f32[2,5] custom-call(p), custom_call_target=\"%s\"\n"
             " ROOT n = f32[2,5] negate(c)\n}\n",
             targets[t]);
    CHECK(both(src, &x, outs, &cst, msg) == TPU_OK);
    CHECK(cst == TPU_OK);
    for (int b = 0; b < 2; b++) {
      CHECK(outs[b].data && tpu_tensor_get_f64(&outs[b], 5) == -9);
      tpu_tensor_free(&outs[b]);
    }
  }
  /* TopK as XLA CPU prints it: k = 3 of each row, descending; 5 and 5 tie: index 4 first. */
  const char *topk =
      "HloModule m\ncmp { a = f32[] parameter(0)\n b = f32[] parameter(1)\n ROOT c = pred[] compare(a, b), direction=GT }\n"
      "ENTRY e {\n p = f32[2,5] parameter(0)\n"
      " ROOT t = (f32[2,3], s32[2,3]) custom-call(p), custom_call_target=\"TopK\", called_computations={%cmp}\n}\n";
  CHECK(both(topk, &x, outs, &cst, msg) == TPU_OK);
  CHECK(cst == TPU_OK);
  const double wv[6] = {5, 4, 3, 9, 6, 5};
  const int64_t wi[6] = {4, 2, 0, 0, 2, 3};
  for (int b = 0; b < 2; b++) {
    for (int i = 0; outs[b].ntuple == 2 && i < 6; i++) {
      CHECK(tpu_tensor_get_f64(&outs[b].elems[0], i) == wv[i]);
      CHECK(tpu_tensor_get_i64(&outs[b].elems[1], i) == wi[i]);
    }
    tpu_tensor_free(&outs[b]);
  }
  /* Several operands (shard_map's markers of several values): the tuple of them. */
  {
    const char *two = "HloModule m\nENTRY e {\n p = f32[2,5] parameter(0)\n n = f32[2,5] negate(p)\n"
                      " t = (f32[2,5], f32[2,5]) custom-call(p, n), custom_call_target=\"xla.sdy.GlobalToLocalShape\"\n"
                      " a = f32[2,5] get-tuple-element(t), index=0\n b = f32[2,5] get-tuple-element(t), index=1\n"
                      " ROOT s = f32[2,5] subtract(a, b)\n}\n";
    CHECK(both(two, &x, outs, &cst, msg) == TPU_OK);
    CHECK(cst == TPU_OK);
    for (int b = 0; b < 2; b++) {
      CHECK(outs[b].data && tpu_tensor_get_f64(&outs[b], 5) == 18);
      tpu_tensor_free(&outs[b]);
    }
  }
  /* TopK over the last of three dimensions, with ties and -inf: k = 2 of [2,2,3]. */
  {
    const char *t3 = "HloModule m\nENTRY e {\n p = f32[2,2,3] parameter(0)\n"
                     " ROOT t = (f32[2,2,2], s32[2,2,2]) custom-call(p), custom_call_target=\"TopK\"\n}\n";
    int64_t d3[3] = {2, 2, 3};
    tpu_tensor y;
    tpu_tensor_alloc(&y, TPU_F32, 3, d3, &d);
    const double yv[12] = {1, 1, 1, 0, 2, 2, -INFINITY, -INFINITY, -1, 7, 8, 7};
    for (int i = 0; i < 12; i++) tpu_tensor_set_f64(&y, i, yv[i]);
    const double tv[8] = {1, 1, 2, 2, -1, -INFINITY, 8, 7};
    const int64_t ti[8] = {0, 1, 1, 2, 2, 0, 1, 0};
    CHECK(both(t3, &y, outs, &cst, msg) == TPU_OK);
    CHECK(cst == TPU_OK);
    for (int b = 0; b < 2; b++) {
      for (int i = 0; outs[b].ntuple == 2 && i < 8; i++) {
        CHECK(tpu_tensor_get_f64(&outs[b].elems[0], i) == tv[i]);
        CHECK_EQ_INT(tpu_tensor_get_i64(&outs[b].elems[1], i), ti[i]);
      }
      tpu_tensor_free(&outs[b]);
    }
    tpu_tensor_free(&y);
  }
  /* TopK is timed like sort: a kernel with vector and transpose-unit work, no MXU. */
  {
    const char *big = "HloModule m\nENTRY e {\n p = f32[64,1024] parameter(0)\n"
                      " ROOT t = (f32[64,8], s32[64,8]) custom-call(p), custom_call_target=\"TopK\"\n}\n";
    tpu_module *mm = NULL;
    CHECK(tpu_hlo_parse("t.hlo", big, strlen(big), &mm, &d) == TPU_OK && tpu_ir_verify(mm, &d) == TPU_OK);
    tpu_compile_opts o = {&g_chip, NULL, NULL, -1, NULL, NULL, 0, 0, NULL, NULL, NULL, NULL};
    tpu_program *p = NULL;
    CHECK(mm && tpu_compile(mm, &o, &p, &d) == TPU_OK);
    int64_t vpu = 0, xlu = 0, mxu = 0;
    for (int i = 0; p && i < p->ninsns; i++) {
      const tpu_insn *in = &p->insns[i];
      if (in->opc == TPU_ISA_VPU) vpu += in->vregs * in->ops;
      if (in->opc == TPU_ISA_XLU) xlu += in->vregs * in->ops;
      if (in->opc == TPU_ISA_MATMUL) mxu++;
    }
    /* 64 x 1024 f32 = 64 registers; a 1024-long bitonic network has 10 * 11 / 2 = 55 stages. */
    CHECK_EQ_INT(vpu, 64 * 55 * 3);
    CHECK_EQ_INT(xlu, 64 * 55);
    CHECK_EQ_INT(mxu, 0);
    tpu_program_free(p);
    tpu_module_free(mm);
  }
  /* A LAPACK call on the TPU backend's values (the chip executor) names the back end. */
  {
    const char *lp = "HloModule m\nENTRY e {\n p = f32[2,5] parameter(0)\n"
                     " ROOT c = f32[2,5] custom-call(p), custom_call_target=\"lapack_strsm_ffi\"\n}\n";
    tpu_module *mm = NULL;
    tpu_tensor o1;
    CHECK(tpu_hlo_parse("t.hlo", lp, strlen(lp), &mm, &d) == TPU_OK && tpu_ir_verify(mm, &d) == TPU_OK);
    CHECK(mm && tpu_chip_run_values(mm, &g_chip, -1, &x, 1, &o1, &d) != TPU_OK);
    CHECK(strstr(d.msg, "\"lapack_strsm_ffi\"") && strstr(d.msg, "TPU back end") && !strstr(d.msg, "interpreter"));
    tpu_module_free(mm);
  }
  /* Refused by name: a LAPACK call on the reference backend says why. */
  const char *lapack = "HloModule m\nENTRY e {\n p = f32[2,5] parameter(0)\n"
                       " ROOT c = f32[2,5] custom-call(p), custom_call_target=\"lapack_spotrf_ffi\"\n}\n";
  CHECK(both(lapack, &x, outs, &cst, msg) != TPU_OK);
  CHECK(strstr(msg, "target \"lapack_spotrf_ffi\"") && strstr(msg, "LAPACK") && strstr(msg, "reference interpreter"));
  /* On the TPU back end the message names the back end, not the interpreter. */
  tpu_module *m = NULL;
  const char *pallas = "HloModule m\nENTRY e {\n p = f32[2,5] parameter(0)\n"
                       " ROOT c = f32[2,5] custom-call(p), custom_call_target=\"tpu_custom_call\"\n}\n";
  CHECK(tpu_hlo_parse("t.hlo", pallas, strlen(pallas), &m, &d) == TPU_OK && tpu_ir_verify(m, &d) == TPU_OK);
  tpu_compile_opts o = {&g_chip, NULL, NULL, -1, NULL, NULL, 0, 0, NULL, NULL, NULL, NULL};
  tpu_program *p = NULL;
  CHECK(tpu_compile(m, &o, &p, &d) != TPU_OK);
  CHECK(strstr(d.msg, "TPU back end") && strstr(d.msg, "tpu_custom_call") && !strstr(d.msg, "interpreter") &&
        d.line == 4);
  tpu_program_free(p);
  tpu_module_free(m);
  /* An identity target that changes the shape on one device is a verifier error. */
  const char *bad = "HloModule m\nENTRY e {\n p = f32[2,5] parameter(0)\n"
                    " ROOT c = f32[1,5] custom-call(p), custom_call_target=\"SPMDFullToShardShape\"\n}\n";
  m = NULL;
  CHECK(tpu_hlo_parse("t.hlo", bad, strlen(bad), &m, &d) == TPU_OK && tpu_ir_verify(m, &d) != TPU_OK);
  CHECK(strstr(d.msg, "SPMDFullToShardShape") != NULL);
  tpu_module_free(m);
  tpu_tensor_free(&x);
  CHECK_DONE();
}
