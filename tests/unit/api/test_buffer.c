/* Buffers of the public API: a loop that feeds each run's outputs to the next run in place
 * equals the loop through caller arrays bit for bit; donation, taking outputs, conversion,
 * bad uses, and allocation failure at every point of a buffered step. */
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "check.h"
#include "tpusim/tpusim.h"

/* One "training step": w' = w - 0.125 * (x^T (x w)), loss = sum(x w); w in bf16 or f32. */
static const char *k_step =
    "HloModule step\n"
    "add_f32 {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n  ROOT c = f32[] add(a, b)\n}\n"
    "ENTRY e {\n"
    "  w = f32[8,4] parameter(0)\n"
    "  x = f32[16,8] parameter(1)\n"
    "  y = f32[16,4] dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n"
    "  g = f32[8,4] dot(x, y), lhs_contracting_dims={0}, rhs_contracting_dims={0}\n"
    "  lr = f32[] constant(0.125)\n"
    "  lrb = f32[8,4] broadcast(lr), dimensions={}\n"
    "  u = f32[8,4] multiply(lrb, g)\n"
    "  w2 = f32[8,4] subtract(w, u)\n"
    "  z = f32[] constant(0)\n"
    "  loss = f32[] reduce(y, z), dimensions={0,1}, to_apply=add_f32\n"
    "  ROOT t = (f32[8,4], f32[]) tuple(w2, loss)\n"
    "}\n";

static const char *k_bf16 =
    "HloModule b\nENTRY e {\n  a = bf16[4] parameter(0)\n  ROOT n = bf16[4] negate(a)\n}\n";

static tpu_sim_array f32_array(int rank, int64_t d0, int64_t d1, const float *data) {
  tpu_sim_array a;
  memset(&a, 0, sizeof a);
  a.dtype = TPU_SIM_F32;
  a.rank = rank;
  a.dims[0] = d0;
  a.dims[1] = d1;
  a.data = data;
  a.nbytes = sizeof(float) * (size_t)d0 * (size_t)(rank > 1 ? d1 : 1);
  return a;
}

static void test_loop(void) {
  tpu_diag d;
  memset(&d, 0, sizeof d);
  tpu_sim_module *m = NULL;
  CHECK_EQ_INT(tpu_sim_load_text("step.hlo", k_step, strlen(k_step), &m, &d), TPU_OK);
  if (!m) return;
  float w[32], x[128];
  for (int i = 0; i < 32; i++) w[i] = (float)((i * 7) % 11) / 11.0f - 0.4f;
  for (int i = 0; i < 128; i++) x[i] = (float)((i * 5) % 13) / 13.0f - 0.5f;
  tpu_sim_options o;
  tpu_sim_options_init(&o);

  /* The loop through caller arrays: outputs copied out, copied back in. */
  float wa[32], loss_a[4];
  memcpy(wa, w, sizeof wa);
  double clock_a = 0;
  for (int s = 0; s < 4; s++) {
    tpu_sim_array in[2] = {f32_array(2, 8, 4, wa), f32_array(2, 16, 8, x)};
    tpu_sim_result *r = NULL;
    CHECK_EQ_INT(tpu_sim_run(m, &o, in, 2, &r, &d), TPU_OK);
    if (!r) return;
    tpu_sim_array o0, o1;
    tpu_sim_metrics mt;
    CHECK_EQ_INT(tpu_sim_result_output(r, 0, &o0, &d), TPU_OK);
    CHECK_EQ_INT(tpu_sim_result_output(r, 1, &o1, &d), TPU_OK);
    CHECK_EQ_INT(tpu_sim_result_metrics(r, &mt, &d), TPU_OK);
    clock_a += mt.step_s;
    memcpy(wa, o0.data, sizeof wa);
    loss_a[s] = *(const float *)o1.data;
    tpu_sim_result_free(r);
  }

  /* The same loop with w kept in the library: each step's w' buffer is the next w, donated. */
  tpu_sim_buffer *wb = NULL, *xb = NULL;
  tpu_sim_array wa0 = f32_array(2, 8, 4, w), xa = f32_array(2, 16, 8, x);
  CHECK_EQ_INT(tpu_sim_buffer_new(&wa0, &wb, &d), TPU_OK);
  CHECK_EQ_INT(tpu_sim_buffer_new(&xa, &xb, &d), TPU_OK);
  double clock_b = 0;
  for (int s = 0; s < 4 && wb && xb; s++) {
    tpu_sim_buffer *in[2] = {wb, xb};
    int donate[2] = {1, 0};
    tpu_sim_result *r = NULL;
    CHECK_EQ_INT(tpu_sim_run_buffers(m, &o, in, 2, donate, &r, &d), TPU_OK);
    if (!r) return;
    CHECK(tpu_sim_buffer_donated(wb) && !tpu_sim_buffer_donated(xb));
    tpu_sim_array gone;
    CHECK_EQ_INT(tpu_sim_buffer_array(wb, &gone, &d), TPU_ERR_ARG);
    tpu_sim_result *r2 = NULL; /* a donated buffer cannot be used again */
    CHECK_EQ_INT(tpu_sim_run_buffers(m, &o, in, 2, NULL, &r2, &d), TPU_ERR_ARG);
    CHECK(strstr(d.msg, "donated") != NULL && r2 == NULL);
    tpu_sim_buffer_free(wb);
    wb = NULL;
    CHECK_EQ_INT(tpu_sim_result_take_output(r, 0, &wb, &d), TPU_OK);
    tpu_sim_buffer *again = NULL;
    CHECK_EQ_INT(tpu_sim_result_take_output(r, 0, &again, &d), TPU_ERR_ARG);
    tpu_sim_array o0, o1;
    CHECK_EQ_INT(tpu_sim_result_output(r, 0, &o0, &d), TPU_ERR_ARG); /* moved */
    CHECK_EQ_INT(tpu_sim_result_output(r, 1, &o1, &d), TPU_OK);
    CHECK(memcmp(o1.data, &loss_a[s], sizeof(float)) == 0);
    tpu_sim_metrics mt;
    CHECK_EQ_INT(tpu_sim_result_metrics(r, &mt, &d), TPU_OK);
    clock_b += mt.step_s;
    tpu_sim_result_free(r); /* the buffer outlives its result */
  }
  tpu_sim_array wf;
  CHECK_EQ_INT(tpu_sim_buffer_array(wb, &wf, &d), TPU_OK);
  CHECK(wf.dtype == TPU_SIM_F32 && wf.rank == 2 && wf.dims[0] == 8 && wf.dims[1] == 4 && wf.nbytes == sizeof wa);
  CHECK(wf.data && memcmp(wf.data, wa, sizeof wa) == 0); /* bit for bit */
  CHECK(clock_a > 0 && clock_a == clock_b);

  /* Misuse: donating a buffer that is also another input; a failed run donates nothing. */
  tpu_sim_buffer *twice[2] = {xb, xb};
  int don[2] = {1, 0};
  tpu_sim_result *r = NULL;
  CHECK_EQ_INT(tpu_sim_run_buffers(m, &o, twice, 2, don, &r, &d), TPU_ERR_ARG);
  CHECK(strstr(d.msg, "also input 1") != NULL);
  tpu_sim_buffer *swapped[2] = {xb, wb}; /* dims differ from the parameters' */
  CHECK_EQ_INT(tpu_sim_run_buffers(m, &o, swapped, 2, don, &r, &d), TPU_ERR_ARG);
  char buf[512];
  tpu_diag_format(&d, buf, sizeof buf);
  CHECK_EQ_STR(buf, "error: input 0 is f32[16,8] but parameter 0 is f32[8,4] (the dimensions differ)");
  CHECK(!tpu_sim_buffer_donated(xb) && r == NULL);
  tpu_sim_buffer *one[1] = {wb};
  CHECK_EQ_INT(tpu_sim_run_buffers(m, &o, one, 1, NULL, &r, &d), TPU_ERR_ARG);
  tpu_sim_buffer *nul[2] = {wb, NULL};
  CHECK_EQ_INT(tpu_sim_run_buffers(m, &o, nul, 2, NULL, &r, &d), TPU_ERR_ARG);
  CHECK_EQ_INT(tpu_sim_run_buffers(m, &o, NULL, 2, NULL, &r, &d), TPU_ERR_ARG);

  /* Allocation failure at every point of a buffered step and the take. */
  tpu_sim_buffer *in[2] = {wb, xb};
  int ok_seen = 0;
  long n;
  for (n = 1; n < 1000000 && !ok_seen; n++) {
    tpu_sim_cache_clear(); /* cold: every step of the pipeline runs */
    tpu_alloc_fail_after(n);
    tpu_status s = tpu_sim_run_buffers(m, &o, in, 2, NULL, &r, &d);
    tpu_sim_buffer *t = NULL;
    if (s == TPU_OK) s = tpu_sim_result_take_output(r, 0, &t, &d);
    tpu_alloc_fail_after(0);
    if (s == TPU_OK) ok_seen = 1;
    else CHECK_EQ_INT(s, TPU_ERR_NOMEM);
    CHECK(!tpu_sim_buffer_donated(wb));
    tpu_sim_buffer_free(t);
    tpu_sim_result_free(r);
    r = NULL;
  }
  CHECK(ok_seen && n > 50);
  tpu_sim_buffer_free(wb);
  tpu_sim_buffer_free(xb);
  tpu_sim_module_free(m);
}

static void test_convert_and_errors(void) {
  tpu_diag d;
  memset(&d, 0, sizeof d);
  tpu_sim_module *m = NULL;
  CHECK_EQ_INT(tpu_sim_load_text("b.hlo", k_bf16, strlen(k_bf16), &m, &d), TPU_OK);
  if (!m) return;
  float v[4] = {1.0f, -2.5f, 3.00390625f, 0.0f}; /* 3.00390625 rounds to 3 in bf16 (ties to even) */
  tpu_sim_array a = f32_array(1, 4, 0, v);
  tpu_sim_buffer *b = NULL;
  CHECK_EQ_INT(tpu_sim_buffer_new(&a, &b, &d), TPU_OK);
  tpu_sim_options o;
  tpu_sim_options_init(&o);
  o.backend = "ref";
  tpu_sim_buffer *in[1] = {b};
  tpu_sim_result *r = NULL;
  CHECK_EQ_INT(tpu_sim_run_buffers(m, &o, in, 1, NULL, &r, &d), TPU_OK); /* f32 buffer, bf16 parameter */
  tpu_sim_buffer *out = NULL;
  if (r) CHECK_EQ_INT(tpu_sim_result_take_output(r, 0, &out, &d), TPU_OK);
  tpu_sim_array oa;
  CHECK_EQ_INT(tpu_sim_buffer_array(out, &oa, &d), TPU_OK);
  const uint16_t want[4] = {0xbf80, 0x4020, 0xc040, 0x8000};
  CHECK(oa.dtype == TPU_SIM_BF16 && oa.nbytes == 8 && memcmp(oa.data, want, 8) == 0);
  tpu_sim_array ba; /* the f32 buffer is unchanged */
  CHECK_EQ_INT(tpu_sim_buffer_array(b, &ba, &d), TPU_OK);
  CHECK(ba.dtype == TPU_SIM_F32 && memcmp(ba.data, v, sizeof v) == 0);
  tpu_sim_result_free(r);
  tpu_sim_buffer_free(out);

  tpu_sim_array bad = a;
  bad.nbytes = 12;
  tpu_sim_buffer *nb = (tpu_sim_buffer *)1;
  CHECK_EQ_INT(tpu_sim_buffer_new(&bad, &nb, &d), TPU_ERR_ARG);
  CHECK(nb == NULL);
  bad = a;
  bad.dtype = 42;
  CHECK_EQ_INT(tpu_sim_buffer_new(&bad, &nb, &d), TPU_ERR_ARG);
  CHECK_EQ_INT(tpu_sim_buffer_new(NULL, &nb, &d), TPU_ERR_ARG);
  CHECK_EQ_INT(tpu_sim_buffer_array(NULL, &ba, &d), TPU_ERR_ARG);
  CHECK_EQ_INT(tpu_sim_buffer_donated(NULL), 0);
  tpu_sim_buffer_free(NULL);
  for (long k = 1; k <= 2; k++) { /* the handle, then the data */
    tpu_alloc_fail_after(k);
    CHECK_EQ_INT(tpu_sim_buffer_new(&a, &nb, &d), TPU_ERR_NOMEM);
    tpu_alloc_fail_after(0);
    CHECK(nb == NULL);
  }
  o.backend = NULL;
  o.mode = "timing"; /* timing takes no inputs */
  CHECK_EQ_INT(tpu_sim_run_buffers(m, &o, in, 1, NULL, &r, &d), TPU_ERR_ARG);
  CHECK_EQ_INT(tpu_sim_run_buffers(m, &o, NULL, 0, NULL, &r, &d), TPU_OK);
  CHECK_EQ_INT(tpu_sim_result_noutputs(r), 0);
  CHECK_EQ_INT(tpu_sim_result_take_output(r, 0, &out, &d), TPU_ERR_ARG);
  tpu_sim_result_free(r);
  tpu_sim_buffer_free(b);
  tpu_sim_module_free(m);
}

int main(void) {
  test_loop();
  test_convert_and_errors();
  CHECK_DONE();
}
