/* IR mutation API: new instructions and computations, attributes kept in step with typed
 * fields, cloning, use replacement, dead code, unused computations, unique names, and
 * out-of-memory at every allocation. */
#include <string.h>

#include "base/alloc.h"
#include "check.h"
#include "hlo/hlo.h"
#include "ir/build.h"
#include "ir/verify.h"
#include "ref/ref.h"

static const char *k_src =
    "HloModule m\n"
    "\n"
    "add_f {\n"
    "  a = f32[] parameter(0)\n"
    "  b = f32[] parameter(1)\n"
    "  ROOT s = f32[] add(a, b)\n"
    "}\n"
    "\n"
    "unused {\n"
    "  ROOT z = f32[] parameter(0)\n"
    "}\n"
    "\n"
    "ENTRY main {\n"
    "  x = f32[4]{0} parameter(0)\n"
    "  y = f32[4]{0} parameter(1)\n"
    "  add.1 = f32[4]{0} add(x, y)\n"
    "  dead = f32[4]{0} multiply(x, x)\n"
    "  ROOT n = f32[4]{0} negate(add.1)\n"
    "}\n";

static tpu_module *parse(const char *src) {
  tpu_module *m = NULL;
  tpu_diag d;
  if (tpu_hlo_parse("t.hlo", src, strlen(src), &m, &d) != TPU_OK) return NULL;
  return m;
}

/* Builds a fused computation (x*y) and a fusion calling it, adds exp(add.1) under a taken
 * name, points the uses of add.1 at the fusion, removes the dead code and the unused
 * computations, then re-points the fusion at a clone of its computation. Returns the
 * status of the first failing step; *text gets the printed module. */
static tpu_status mutate(tpu_module *m, tpu_diag *d, char **text) {
  tpu_builder b;
  *text = NULL;
  TPU_TRY(tpu_builder_init(&b, m, d));
  tpu_status st = TPU_OK;
  tpu_comp *e = m->entry, *f = NULL;
  tpu_instr *x = e->params[0], *y = e->params[1], *root = e->root, *add = root->operands[0];
  tpu_instr *ex = NULL, *fp0 = NULL, *fp1 = NULL, *fm = NULL, *fu = NULL, *ops[2];
  /* A fused computation: param_0 * param_1. */
  st = tpu_build_comp(&b, "fused_computation", e, &f);
  if (st == TPU_OK) st = tpu_build_param(&b, f, 0, "param_0", &x->shape, &fp0);
  if (st == TPU_OK) st = tpu_build_param(&b, f, 1, "param_1", &y->shape, &fp1);
  ops[0] = fp0, ops[1] = fp1;
  if (st == TPU_OK) st = tpu_build_instr(&b, f, TPU_OP_MULTIPLY, "multiply", &x->shape, ops, 2, tpu_noloc(), &fm);
  if (st == TPU_OK) {
    tpu_build_set_root(f, fm);
    st = tpu_build_finish(&b, f);
  }
  ops[0] = x, ops[1] = y;
  if (st == TPU_OK) st = tpu_build_instr(&b, e, TPU_OP_FUSION, "fusion", &x->shape, ops, 2, tpu_noloc(), &fu);
  if (st == TPU_OK) st = tpu_build_set_attr(&b, fu, "kind", "kLoop");
  if (st == TPU_OK) st = tpu_build_set_attr(&b, fu, "calls", f->name);
  /* A new op named like an existing one gets a fresh suffix. */
  tpu_instr *ops1[1] = {add};
  if (st == TPU_OK) st = tpu_build_instr(&b, e, TPU_OP_EXP, "add.1", &x->shape, ops1, 1, tpu_noloc(), &ex);
  if (st == TPU_OK) {
    /* root = negate(add.1) becomes negate(fusion); exp(add.1) is dead. */
    int n = tpu_build_replace_uses(e, add, fu);
    if (n != 2) st = TPU_FAIL(d, TPU_ERR_INVALID, tpu_noloc(), "replaced %d uses", n); /* negate and the new exp */
  }
  if (st == TPU_OK && tpu_build_remove_dead(&b, e) < 0) st = d->status;
  if (st == TPU_OK && tpu_build_remove_unused_comps(&b) < 0) st = d->status;
  tpu_comp *cl = NULL;
  if (st == TPU_OK) st = tpu_build_clone_comp(&b, f, "fused_computation", e, &cl);
  if (st == TPU_OK) st = tpu_build_set_attr(&b, fu, "calls", cl->name);
  if (st == TPU_OK && tpu_build_remove_unused_comps(&b) < 0) st = d->status;
  if (st == TPU_OK && ex && ex->name && strcmp(ex->name, "add.1") == 0)
    st = TPU_FAIL(d, TPU_ERR_INVALID, tpu_noloc(), "name not made unique");
  tpu_builder_deinit(&b);
  if (st == TPU_OK) {
    *text = tpu_hlo_print(m);
    if (!*text) st = TPU_FAIL(d, TPU_ERR_NOMEM, tpu_noloc(), "print");
  }
  return st;
}

static const char *k_want =
    "HloModule m\n"
    "\n"
    "fused_computation.3 {\n"
    "  param_0.4 = f32[4]{0} parameter(0)\n"
    "  param_1.5 = f32[4]{0} parameter(1)\n"
    "  ROOT multiply.6 = f32[4]{0} multiply(param_0.4, param_1.5)\n"
    "}\n"
    "\n"
    "ENTRY main {\n"
    "  x = f32[4]{0} parameter(0)\n"
    "  y = f32[4]{0} parameter(1)\n"
    "  fusion = f32[4]{0} fusion(x, y), kind=kLoop, calls=fused_computation.3\n"
    "  ROOT n = f32[4]{0} negate(fusion)\n"
    "}\n";

int main(void) {
  tpu_diag d;
  tpu_module *m = parse(k_src);
  CHECK(m != NULL);
  if (!m) CHECK_DONE();
  char *text = NULL;
  tpu_status st = mutate(m, &d, &text);
  CHECK_EQ_INT(st, TPU_OK);
  if (st != TPU_OK) {
    char buf[1200];
    tpu_diag_format(&d, buf, sizeof buf);
    fprintf(stderr, "%s\n", buf);
  }
  CHECK_EQ_STR(text, k_want);
  CHECK(tpu_ir_verify(m, &d) == TPU_OK);
  /* Typed fields follow the text. */
  tpu_instr *fu = m->entry->root->operands[0];
  CHECK_EQ_INT(fu->op, TPU_OP_FUSION);
  CHECK(fu->calls == m->comps[0]);
  CHECK_EQ_INT(m->ncomps, 2);
  CHECK(tpu_module_find_comp(m, "fused_computation.3") == m->comps[0]);
  CHECK(tpu_module_find_comp(m, "unused") == NULL);
  /* ids and order are consistent. */
  for (int i = 0; i < m->entry->ninstrs; i++) CHECK_EQ_INT(m->entry->instrs[i]->id, i);
  CHECK_EQ_INT(m->entry->norder, m->entry->ninstrs);
  CHECK(m->entry->order[m->entry->norder - 1] == m->entry->root);
  /* The printed module parses back to the same text and runs: -(x*y). */
  tpu_module *m2 = parse(text);
  CHECK(m2 != NULL);
  if (m2) {
    char *t2 = tpu_hlo_print(m2);
    CHECK_EQ_STR(t2, text);
    tpu_free(t2);
    tpu_tensor args[2], out;
    int64_t dims[1] = {4};
    tpu_tensor_alloc(&args[0], TPU_F32, 1, dims, &d);
    tpu_tensor_alloc(&args[1], TPU_F32, 1, dims, &d);
    for (int i = 0; i < 4; i++) {
      tpu_tensor_set_f64(&args[0], i, i + 1);
      tpu_tensor_set_f64(&args[1], i, 2);
    }
    CHECK(tpu_ir_verify(m2, &d) == TPU_OK);
    CHECK(tpu_ref_run(m2, args, 2, &out, &d) == TPU_OK);
    for (int i = 0; i < 4; i++) CHECK_NEAR(tpu_tensor_get_f64(&out, i), -2.0 * (i + 1), 0);
    tpu_tensor_free(&out);
    tpu_tensor_free(&args[0]);
    tpu_tensor_free(&args[1]);
    tpu_module_free(m2);
  }
  tpu_free(text);
  tpu_module_free(m);

  /* A cycle made by a bad rewrite is reported by finish, not looped on. */
  m = parse(k_src);
  if (m) {
    tpu_builder b;
    CHECK(tpu_builder_init(&b, m, &d) == TPU_OK);
    tpu_instr *root = m->entry->root, *add = root->operands[0];
    add->operands[0] = root; /* add(negate(add)) */
    CHECK_EQ_INT(tpu_build_finish(&b, m->entry), TPU_ERR_INVALID);
    CHECK(strstr(d.msg, "depend on itself") != NULL);
    tpu_builder_deinit(&b);
    tpu_module_free(m);
  }

  /* Out of memory at every allocation of the mutation: an error, never a crash or leak. */
  long total = 0;
  m = parse(k_src);
  tpu_alloc_fail_after(0);
  if (m) {
    st = mutate(m, &d, &text);
    total = tpu_alloc_fail_after(0);
    tpu_free(text);
    tpu_module_free(m);
  }
  CHECK(total > 5);
  int failed = 0;
  for (long i = 1; i <= total; i++) {
    m = parse(k_src);
    if (!m) continue;
    tpu_alloc_fail_after(i);
    st = mutate(m, &d, &text);
    tpu_alloc_fail_after(0);
    if (st != TPU_OK) {
      failed++;
      CHECK_EQ_INT(st, TPU_ERR_NOMEM);
      CHECK(text == NULL);
    }
    tpu_free(text);
    tpu_module_free(m);
  }
  CHECK(failed > 0);
  CHECK_DONE();
}
