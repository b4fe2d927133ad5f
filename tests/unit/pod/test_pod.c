/* The pod executor: every collective's values on 4 devices against hand-computed results,
 * the documented reduction order, group forms (explicit, iota, mesh axes), divergence
 * caught instead of hanging, verifier errors, and shardings cutting and assembling arrays. */
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "hlo/hlo.h"
#include "ir/collective.h"
#include "ir/verify.h"
#include "pod/pod.h"
#include "pod/sharding.h"
#include "ref/ref.h"

#define NDEV 4

static tpu_status run_dev(void *user, int64_t dev, const tpu_ref_comm *comm, const tpu_tensor *args, int nargs,
                          tpu_tensor *out, tpu_diag *d) {
  (void)dev;
  tpu_ref_opts o = {NULL, NULL, NULL, comm, NULL, 0, NULL, 0};
  return tpu_ref_run_opts(user, args, nargs, &o, out, d);
}

static tpu_module *parse(const char *src, tpu_diag *d) {
  tpu_module *m = NULL;
  tpu_status st = tpu_hlo_parse("t.hlo", src, strlen(src), &m, d);
  if (st == TPU_OK) st = tpu_ir_verify(m, d);
  if (st != TPU_OK) {
    tpu_module_free(m);
    return NULL;
  }
  return m;
}

/* Runs src on NDEV devices with device d's input x_d[i] = 10 d + i (f32[n]); outs[d] get
 * the results. Returns the status (and d filled). */
static tpu_status run4(const char *src, int n, tpu_tensor *outs, tpu_diag *d) {
  tpu_module *m = parse(src, d);
  if (!m) {
    fprintf(stderr, "%s\n%s\n", d->msg, src);
    return TPU_ERR_INVALID;
  }
  tpu_tensor x[NDEV];
  tpu_tensor *args[NDEV];
  int64_t dims[1] = {n};
  for (int k = 0; k < NDEV; k++) {
    tpu_tensor_alloc(&x[k], TPU_F32, 1, dims, d);
    for (int i = 0; i < n; i++) tpu_tensor_set_f64(&x[k], i, 10 * k + i);
    args[k] = &x[k];
  }
  tpu_status st = tpu_pod_run(m, run_dev, m, args, 1, outs, d);
  if (st != TPU_OK) fprintf(stderr, "run: %d:%d %s\n", d->line, d->col, d->msg);
  for (int k = 0; k < NDEV; k++) tpu_tensor_free(&x[k]);
  tpu_module_free(m);
  return st;
}

static const char *k_add = "add { a = f32[] parameter(0)\n b = f32[] parameter(1)\n ROOT s = f32[] add(a, b) }\n";

/* An f32[n] -> RESULT module with one collective line. */
static void module(char *buf, size_t cap, const char *result, const char *op_attrs) {
  const char *sub = "sub { a = f32[] parameter(0)\n b = f32[] parameter(1)\n ROOT s = f32[] subtract(a, b) }\n";
  snprintf(buf, cap, "HloModule m, num_partitions=4\n%sENTRY e {\n p = f32[4] parameter(0)\n ROOT r = %s %s\n}\n",
           strstr(op_attrs, "=add") ? k_add : strstr(op_attrs, "=sub") ? sub : "", result, op_attrs);
}

static double at(const tpu_tensor *t, int i) { return tpu_tensor_get_f64(t, i); }

static void free_outs(tpu_tensor *outs) {
  for (int k = 0; k < NDEV; k++) tpu_tensor_free(&outs[k]);
}

static void test_all_reduce(void) {
  char src[2048];
  tpu_tensor outs[NDEV];
  tpu_diag d;
  module(src, sizeof src, "f32[4]", "all-reduce(p), channel_id=1, replica_groups={{0,1,2,3}}, to_apply=add");
  CHECK(run4(src, 4, outs, &d) == TPU_OK);
  for (int k = 0; k < NDEV; k++)
    for (int i = 0; i < 4; i++) CHECK(at(&outs[k], i) == 60 + 4 * i); /* sum_d (10 d + i) */
  free_outs(outs);
  /* The order is the group's: ((x1 - x3) - x0) - x2, the same on every device. */
  module(src, sizeof src, "f32[4]", "all-reduce(p), channel_id=1, replica_groups={{1,3,0,2}}, to_apply=sub");
  CHECK(run4(src, 4, outs, &d) == TPU_OK);
  for (int k = 0; k < NDEV; k++)
    for (int i = 0; i < 4; i++) CHECK(at(&outs[k], i) == ((10.0 + i) - (30 + i) - i) - (20 + i));
  free_outs(outs);
  /* Iota groups [2,2]<=[2,2]T(1,0) are {0,2},{1,3}. */
  module(src, sizeof src, "f32[4]",
         "all-reduce(p), channel_id=1, replica_groups=[2,2]<=[2,2]T(1,0), use_global_device_ids=true, to_apply=add");
  CHECK(run4(src, 4, outs, &d) == TPU_OK);
  CHECK(at(&outs[0], 0) == 20 && at(&outs[2], 0) == 20 && at(&outs[1], 0) == 40 && at(&outs[3], 1) == 42);
  free_outs(outs);
  /* Mesh axes: mesh['x'=2,'y'=2] {'x'} groups devices that differ in x: {0,2},{1,3}. */
  module(src, sizeof src, "f32[4]",
         "all-reduce(p), channel_id=1, replica_groups=mesh['x'=2,'y'=2] {'x'}, use_global_device_ids=true, to_apply=add");
  CHECK(run4(src, 4, outs, &d) == TPU_OK);
  CHECK(at(&outs[0], 0) == 20 && at(&outs[1], 0) == 40);
  free_outs(outs);
  module(src, sizeof src, "f32[4]",
         "all-reduce(p), channel_id=1, replica_groups=mesh['x'=2,'y'=2] {'y'}, use_global_device_ids=true, to_apply=add");
  CHECK(run4(src, 4, outs, &d) == TPU_OK);
  CHECK(at(&outs[0], 0) == 10 && at(&outs[1], 0) == 10 && at(&outs[2], 0) == 50);
  free_outs(outs);
  /* A sub-axis: mesh['x'=4] {'x':(1)2} splits x = 4 into major 2 x minor 2; the groups hold
   * the devices that differ in the major half: {0,2},{1,3}. */
  module(src, sizeof src, "f32[4]",
         "all-reduce(p), channel_id=1, replica_groups=mesh['x'=4] {'x':(1)2}, use_global_device_ids=true, to_apply=add");
  CHECK(run4(src, 4, outs, &d) == TPU_OK);
  CHECK(at(&outs[0], 0) == 20 && at(&outs[1], 0) == 40 && at(&outs[2], 0) == 20);
  free_outs(outs);
}

static void test_data_movement(void) {
  char src[2048];
  tpu_tensor outs[NDEV];
  tpu_diag d;
  module(src, sizeof src, "f32[8]", "all-gather(p), channel_id=1, replica_groups={{0,2},{1,3}}, dimensions={0}");
  CHECK(run4(src, 4, outs, &d) == TPU_OK);
  CHECK(at(&outs[0], 0) == 0 && at(&outs[0], 4) == 20 && at(&outs[3], 0) == 10 && at(&outs[3], 7) == 33);
  free_outs(outs);
  module(src, sizeof src, "f32[1]", "reduce-scatter(p), channel_id=1, replica_groups={{0,1,2,3}}, dimensions={0}, to_apply=add");
  CHECK(run4(src, 4, outs, &d) == TPU_OK);
  for (int k = 0; k < NDEV; k++) CHECK(at(&outs[k], 0) == 60 + 4 * k);
  free_outs(outs);
  module(src, sizeof src, "f32[4]", "all-to-all(p), channel_id=1, replica_groups={{0,1,2,3}}, dimensions={0}");
  CHECK(run4(src, 4, outs, &d) == TPU_OK);
  for (int k = 0; k < NDEV; k++)
    for (int j = 0; j < 4; j++) CHECK(at(&outs[k], j) == 10 * j + k); /* chunk k of device j */
  free_outs(outs);
  module(src, sizeof src, "f32[4]", "collective-permute(p), channel_id=1, source_target_pairs={{0,1},{1,2},{2,3}}");
  CHECK(run4(src, 4, outs, &d) == TPU_OK);
  CHECK(at(&outs[0], 0) == 0 && at(&outs[0], 3) == 0); /* no sender: zeros */
  CHECK(at(&outs[1], 1) == 1 && at(&outs[3], 2) == 22);
  free_outs(outs);
  module(src, sizeof src, "f32[4]", "collective-broadcast(p), channel_id=1, replica_groups={{2,0},{3,1}}");
  CHECK(run4(src, 4, outs, &d) == TPU_OK);
  CHECK(at(&outs[0], 1) == 21 && at(&outs[2], 1) == 21 && at(&outs[1], 0) == 30);
  free_outs(outs);
  /* Asynchronous pairs: the -start holds (operand, result); -done hands the result over. */
  const char *async =
      "HloModule m, num_partitions=4\n"
      "ENTRY e {\n p = f32[4] parameter(0)\n"
      " s = (f32[4], f32[16]) all-gather-start(p), channel_id=1, replica_groups={{0,1,2,3}}, dimensions={0}\n"
      " g = f32[16] all-gather-done(s)\n"
      " c = (f32[4], f32[4], u32[], u32[]) collective-permute-start(p), channel_id=2, source_target_pairs={{0,3},{3,0}}\n"
      " q = f32[4] collective-permute-done(c)\n"
      " i = u32[] partition-id()\n"
      " ROOT t = (f32[16], f32[4], u32[]) tuple(g, q, i)\n}\n";
  CHECK(run4(async, 4, outs, &d) == TPU_OK);
  for (int k = 0; k < NDEV; k++) {
    CHECK(at(&outs[k].elems[0], 13) == 31);
    CHECK(tpu_tensor_get_i64(&outs[k].elems[2], 0) == k);
  }
  CHECK(at(&outs[0].elems[1], 0) == 30 && at(&outs[3].elems[1], 0) == 0 && at(&outs[1].elems[1], 2) == 0);
  free_outs(outs);
}

static void test_divergence_and_errors(void) {
  char src[2048];
  tpu_tensor outs[NDEV];
  tpu_diag d;
  /* Only device 0 takes the branch with the all-reduce: the run fails, it does not hang. */
  snprintf(src, sizeof src,
           "HloModule m, num_partitions=4\n%s"
           "yes { x = f32[4] parameter(0)\n ROOT r = f32[4] all-reduce(x), channel_id=1, replica_groups={{0,1,2,3}}, to_apply=add }\n"
           "no { ROOT x = f32[4] parameter(0) }\n"
           "ENTRY e {\n p = f32[4] parameter(0)\n i = u32[] partition-id()\n z = u32[] constant(0)\n"
           " c = pred[] compare(i, z), direction=EQ\n"
           " ROOT r = f32[4] conditional(c, p, p), true_computation=yes, false_computation=no\n}\n",
           k_add);
  tpu_status st = run4(src, 4, outs, &d);
  CHECK(st != TPU_OK);
  CHECK(strstr(d.msg, "diverged") != NULL);
  /* Verifier: groups must partition the devices; shapes must fit the group size. */
  module(src, sizeof src, "f32[4]", "all-reduce(p), channel_id=1, replica_groups={{0,1},{1,2}}, to_apply=add");
  CHECK(parse(src, &d) == NULL && strstr(d.msg, "name 1 twice") && d.line == 7);
  module(src, sizeof src, "f32[4]", "all-reduce(p), channel_id=1, replica_groups={{0,1}}, to_apply=add");
  CHECK(parse(src, &d) == NULL && strstr(d.msg, "leave 2 out"));
  module(src, sizeof src, "f32[12]", "all-gather(p), channel_id=1, replica_groups={{0,1,2,3}}, dimensions={0}");
  CHECK(parse(src, &d) == NULL && strstr(d.msg, "times 4"));
  module(src, sizeof src, "f32[4]", "reduce-scatter(p), channel_id=1, replica_groups={{0,1,2}}, dimensions={0}, to_apply=add");
  CHECK(parse(src, &d) == NULL);
  module(src, sizeof src, "f32[4]", "collective-permute(p), channel_id=1, source_target_pairs={{0,1},{2,1}}");
  CHECK(parse(src, &d) == NULL && strstr(d.msg, "as a target twice"));
  module(src, sizeof src, "f32[4]", "all-reduce(p), channel_id=1, replica_groups=mesh['x'=2,'y'=2] {'z'}, to_apply=add");
  CHECK(parse(src, &d) == NULL && strstr(d.msg, "cannot read replica_groups"));
}

static void test_sharding(void) {
  tpu_diag d;
  tpu_sharding s;
  CHECK(tpu_sharding_parse("{devices=[2,1,4]<=[8] last_tile_dim_replicate}", tpu_noloc(), &s, &d) == TPU_OK);
  CHECK(s.kind == TPU_SHARD_TILED && s.ntile == 3 && s.nrep == 1 && s.ndevices == 8);
  tpu_shape local;
  memset(&local, 0, sizeof local);
  local.dtype = TPU_F32;
  local.rank = 2;
  local.dims[0] = 2;
  local.dims[1] = 3;
  CHECK(tpu_sharding_check(&s, &local, 8, tpu_noloc(), "x", &d) == TPU_OK);
  tpu_tensor g, shard[8];
  int64_t gd[2] = {4, 3};
  tpu_tensor_alloc(&g, TPU_F32, 2, gd, &d);
  for (int i = 0; i < 12; i++) tpu_tensor_set_f64(&g, i, i);
  for (int k = 0; k < 8; k++) CHECK(tpu_sharding_shard(&s, k, &g, &local, &shard[k], &d) == TPU_OK);
  CHECK(at(&shard[0], 0) == 0 && at(&shard[3], 5) == 5 && at(&shard[5], 0) == 6 && at(&shard[7], 5) == 11);
  const tpu_tensor *sp[8];
  for (int k = 0; k < 8; k++) sp[k] = &shard[k];
  tpu_tensor back;
  CHECK(tpu_sharding_assemble(&s, sp, 8, &local, &back, &d) == TPU_OK);
  CHECK(back.dims[0] == 4 && back.dims[1] == 3 && memcmp(back.data, g.data, g.nbytes) == 0);
  tpu_tensor_free(&back);
  for (int k = 0; k < 8; k++) tpu_tensor_free(&shard[k]);
  tpu_tensor_free(&g);
  tpu_sharding_free(&s);
  /* Explicit device lists and uneven splits (XLA pads the last shard). */
  CHECK(tpu_sharding_parse("{devices=[2]1,0}", tpu_noloc(), &s, &d) == TPU_OK);
  local.rank = 1;
  local.dims[0] = 3;
  int64_t five[1] = {5};
  tpu_tensor_alloc(&g, TPU_F32, 1, five, &d);
  for (int i = 0; i < 5; i++) tpu_tensor_set_f64(&g, i, i + 1);
  tpu_tensor a, b;
  CHECK(tpu_sharding_shard(&s, 0, &g, &local, &a, &d) == TPU_OK); /* device 0 holds tile 1 */
  CHECK(tpu_sharding_shard(&s, 1, &g, &local, &b, &d) == TPU_OK);
  CHECK(at(&a, 0) == 4 && at(&a, 1) == 5 && at(&a, 2) == 0 && at(&b, 0) == 1);
  tpu_tensor_free(&a);
  tpu_tensor_free(&b);
  tpu_tensor_free(&g);
  tpu_sharding_free(&s);
  CHECK(tpu_sharding_parse("{{replicated}, {maximal device=1}, {devices=[4,2]<=[2,4]T(1,0) last_tile_dim_replicate}}",
                           tpu_noloc(), &s, &d) == TPU_OK);
  CHECK(s.kind == TPU_SHARD_TUPLE && s.nelems == 3 && s.elems[1].kind == TPU_SHARD_MAXIMAL && s.elems[1].maximal == 1);
  CHECK(s.elems[2].devices[1] == 4 && s.elems[2].devices[2] == 1);
  tpu_sharding_free(&s);
  CHECK(tpu_sharding_parse("{devices=[2,2]0,1,2}", tpu_noloc(), &s, &d) != TPU_OK);
  CHECK(tpu_sharding_parse("{devices=[2]<=[2] bogus}", tpu_noloc(), &s, &d) != TPU_OK);
  /* manual subgroups (a shard_map manual over part of the mesh): no global view, so the
   * plain parser refuses them; the partial one reads them (a scalar's too: every tile
   * dimension a subgroup) */
  const char *pm = "{devices=[1,1,2,4]<=[8] last_tile_dims={manual, replicated}}";
  CHECK(tpu_sharding_parse(pm, tpu_noloc(), &s, &d) != TPU_OK);
  CHECK(strstr(d.msg, "manual subgroups") != NULL);
  CHECK(tpu_sharding_parse_partial(pm, tpu_noloc(), &s, &d) == TPU_OK);
  CHECK(s.kind == TPU_SHARD_TILED && s.ntile == 4 && s.nrep == 2 && s.nmanual == 1 && s.ndevices == 8);
  tpu_sharding_free(&s);
  CHECK(tpu_sharding_parse_partial("{devices=[2,4]<=[8] last_tile_dims={manual, replicated}}", tpu_noloc(), &s, &d) ==
        TPU_OK);
  CHECK(s.ntile == 2 && s.nrep == 2 && s.nmanual == 1);
  tpu_sharding_free(&s);
}

int main(void) {
  test_all_reduce();
  test_data_movement();
  test_divergence_and_errors();
  test_sharding();
  CHECK_DONE();
}
