/* spmd-partition: programs annotated as JAX annotates them (sdy shardings and Sharding
 * custom calls over a mesh) are partitioned, run on every chip by the pod executor, and
 * give the unpartitioned program's values — bit-identical for integer programs — with the
 * collectives the strategy needs: none for data parallelism, one all-reduce per Megatron
 * block, partial sums for a split contraction, an all-gather where a split value is used
 * whole. */
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "chip/chip.h"
#include "chip/exec.h"
#include "compile/spmd/spmd.h"
#include "hlo/hlo.h"
#include "ir/collective.h"
#include "ir/verify.h"
#include "pod/podio.h"
#include "ref/ref.h"

#define MESH "HloModule m, frontend_attributes={xla.sdy.meshes={mesh = #sdy.mesh<[\"x\"=2, \"y\"=2]>}}\n"
#define SDY(dims) "frontend_attributes={xla.sdy.sharding=\"#sdy.sharding<@mesh, " dims ">\"}"

static tpu_module *parse(const char *src) {
  tpu_module *m = NULL;
  tpu_diag d;
  if (tpu_hlo_parse("t.hlo", src, strlen(src), &m, &d) != TPU_OK || tpu_ir_verify(m, &d) != TPU_OK) {
    fprintf(stderr, "%s\n%s\n", d.msg, src);
    tpu_module_free(m);
    return NULL;
  }
  return m;
}

/* Deterministic inputs for every parameter: small integers (or their float values). */
static void inputs(const tpu_module *m, tpu_tensor *args) {
  tpu_diag d;
  for (int i = 0; i < m->entry->nparams; i++) {
    const tpu_shape *s = &m->entry->params[i]->shape;
    tpu_tensor_alloc(&args[i], s->dtype, s->rank, s->dims, &d);
    int64_t n = tpu_tensor_numel(&args[i]);
    for (int64_t k = 0; k < n; k++) tpu_tensor_set_i64(&args[i], k, (k * 7 + i * 3) % 11 - 5);
  }
}

static int count_op(const tpu_module *m, tpu_opcode op) {
  int n = 0;
  for (int c = 0; c < m->ncomps; c++)
    for (int i = 0; i < m->comps[c]->ninstrs; i++) n += m->comps[c]->instrs[i]->op == op;
  return n;
}

static int g_devices = 4; /* chips of the mesh check_ref partitions for (MESH: 2x2) */
static int64_t g_window = 0; /* the mesh's windowed_min_devices (0: no windowed einsum) */
static int64_t g_window_max = 0; /* and its windowed_max_devices (0: no bound) */
static int g_keep_ar = 0; /* the mesh's keep_full_all_reduce */
static double g_ring4 = 0; /* the mesh's windowed_ring4_multiplier */

/* Partitions m over its own mesh, with windowed einsums from g_window devices. */
static tpu_status partition(tpu_module *m, tpu_diag *d) {
  if (!g_window && !g_keep_ar) return tpu_spmd_partition(m, NULL, d);
  tpu_mesh mesh;
  int found = 0;
  TPU_TRY(tpu_mesh_from_module(m, &mesh, &found, d));
  if (!found) return tpu_spmd_partition(m, NULL, d);
  mesh.windowed_min_devices = g_window;
  mesh.windowed_max_devices = g_window_max;
  mesh.keep_full_all_reduce = g_keep_ar;
  mesh.windowed_ring4_multiplier = g_ring4;
  tpu_status st = tpu_spmd_partition(m, &mesh, d);
  tpu_mesh_free(&mesh);
  return st;
}

/* Partitions src, checks the collective counts, runs it on every chip from the same global
 * inputs as the unpartitioned run and compares (exactly, or within tol). */
static void check_ref(const char *name, const char *src, const char *ref_src, int all_reduce, int all_gather,
                      double tol) {
  tpu_module *ref = parse(ref_src), *m = parse(src);
  CHECK(ref && m);
  if (!ref || !m) {
    tpu_module_free(ref);
    tpu_module_free(m);
    return;
  }
  tpu_diag d;
  tpu_tensor args[8], want, got;
  inputs(ref, args);
  int nargs = ref->entry->nparams;
  tpu_status st;
  st = tpu_ref_run(ref, args, nargs, &want, &d);
  CHECK(st == TPU_OK);
  if (st != TPU_OK) fprintf(stderr, "%s: unpartitioned: %s\n", name, d.msg);
  CHECK(tpu_spmd_needed(m));
  st = partition(m, &d);
  CHECK(st == TPU_OK);
  if (st != TPU_OK) fprintf(stderr, "%s: %s\n", name, d.msg);
  if (st == TPU_OK) {
    if (count_op(m, TPU_OP_ALL_REDUCE) != all_reduce || count_op(m, TPU_OP_ALL_GATHER) != all_gather) {
      fprintf(stderr, "%s: %d all-reduce (want %d), %d all-gather (want %d)\n", name, count_op(m, TPU_OP_ALL_REDUCE),
              all_reduce, count_op(m, TPU_OP_ALL_GATHER), all_gather);
      CHECK(0);
    }
    CHECK(tpu_module_device_count(m) == g_devices);
    tpu_podio pc;
    st = tpu_podio_prepare(m, NULL, 0, &pc, &d);
    CHECK(st == TPU_OK);
    if (st == TPU_OK) {
      st = tpu_podio_values(&pc, m, NULL, -1, args, nargs, NULL, &got, NULL, &d);
      CHECK(st == TPU_OK);
      if (st != TPU_OK) fprintf(stderr, "%s: %s\n", name, d.msg);
      if (st == TPU_OK) {
        const tpu_tensor *a[8], *b[8];
        int na = tpu_tensor_count_leaves(&got), nb = tpu_tensor_count_leaves(&want);
        CHECK(na == nb && na <= 8);
        tpu_tensor_collect_leaves(&got, a);
        tpu_tensor_collect_leaves(&want, b);
        for (int k = 0; k < na && k < 8; k++) {
          CHECK(a[k]->rank == b[k]->rank && a[k]->nbytes == b[k]->nbytes);
          if (a[k]->nbytes != b[k]->nbytes) continue;
          if (tol == 0) {
            if (memcmp(a[k]->data, b[k]->data, a[k]->nbytes)) {
              fprintf(stderr, "%s: result %d differs from the unpartitioned run\n", name, k);
              CHECK(0);
            }
          } else {
            for (int64_t i = 0; i < tpu_tensor_numel(a[k]); i++) {
              double x = tpu_tensor_get_f64(a[k], i), y = tpu_tensor_get_f64(b[k], i);
              if (!(x - y <= tol * (1 + (y < 0 ? -y : y)) && y - x <= tol * (1 + (y < 0 ? -y : y)))) {
                fprintf(stderr, "%s: result %d[%lld] %g, want %g\n", name, k, (long long)i, x, y);
                CHECK(0);
                break;
              }
            }
          }
        }
        tpu_tensor_free(&got);
      }
      tpu_podio_free(&pc);
    }
  }
  tpu_tensor_free(&want);
  for (int i = 0; i < nargs; i++) tpu_tensor_free(&args[i]);
  tpu_module_free(ref);
  tpu_module_free(m);
}

/* How many `op` instructions src has once partitioned (-1: it does not partition). */
static int count_after(const char *src, tpu_opcode op) {
  tpu_module *m = parse(src);
  tpu_diag d;
  int n = m && partition(m, &d) == TPU_OK ? count_op(m, op) : -1;
  tpu_module_free(m);
  return n;
}

static void check(const char *name, const char *src, int all_reduce, int all_gather, double tol) {
  check_ref(name, src, src, all_reduce, all_gather, tol);
}

/* An expert dispatch, s32[16,4] split [(x, y), -] moved to `to` (a sharding attribute
 * text) on the 8-chip mesh `axes`: values equal the unpartitioned run's, one all-to-all over
 * the replica groups `groups`, then one collective-permute. */
static void check_dispatch(const char *axes, const char *to, const char *groups) {
  char mesh[256], src[2048], ref[2048];
  snprintf(mesh, sizeof mesh, "HloModule m, frontend_attributes={xla.sdy.meshes={mesh = #sdy.mesh<[%s]>}}\n", axes);
  const char *body = " x = s32[16,4] parameter(0), " SDY("[{\\\"x\\\",\\\"y\\\"}, {}]") "\n";
  snprintf(src, sizeof src,
           "%sENTRY e {\n%s c = s32[16,4] custom-call(x), custom_call_target=\"Sharding\",%s\n"
           " ROOT n = s32[16,4] multiply(c, c)\n}\n",
           mesh, body, to);
  snprintf(ref, sizeof ref, "%sENTRY e {\n%s c = s32[16,4] copy(x)\n ROOT n = s32[16,4] multiply(c, c)\n}\n", mesh, body);
  g_devices = 8;
  check_ref(axes, src, ref, 0, 0, 0);
  g_devices = 4;
  CHECK_EQ_INT(count_after(src, TPU_OP_ALL_TO_ALL), 1);
  CHECK_EQ_INT(count_after(src, TPU_OP_COLLECTIVE_PERMUTE), 1);
  tpu_module *m = parse(src);
  tpu_diag d;
  const char *got = NULL;
  if (m && tpu_spmd_partition(m, NULL, &d) == TPU_OK)
    for (int i = 0; i < m->entry->ninstrs; i++)
      if (m->entry->instrs[i]->op == TPU_OP_ALL_TO_ALL)
        for (int a = 0; a < m->entry->instrs[i]->nattrs; a++)
          if (!strcmp(m->entry->instrs[i]->attrs[a].name, "replica_groups")) got = m->entry->instrs[i]->attrs[a].value;
  if (!got || strcmp(got, groups)) fprintf(stderr, "%s: all-to-all groups %s, want %s\n", axes, got ? got : "-", groups);
  CHECK(got && !strcmp(got, groups));
  tpu_module_free(m);
}

/* A weight gradient's operands split over both axes of the batch, and its dot. */
#define GRAD_XG                                                                                   \
  MESH "ENTRY e {\n x = s32[8,6] parameter(0), " SDY("[{\\\"x\\\",\\\"y\\\"}, {}]") "\n" \
       " g = s32[8,4] parameter(1), " SDY("[{\\\"x\\\",\\\"y\\\"}, {}]") "\n"
#define GRAD_DOT " d = s32[6,4] dot(x, g), lhs_contracting_dims={0}, rhs_contracting_dims={0}\n"

static const char *k_add = "add { a = s32[] parameter(0)\n b = s32[] parameter(1)\n ROOT r = s32[] add(a, b) }\n";
static const char *k_max = "mx { a = s32[] parameter(0)\n b = s32[] parameter(1)\n ROOT r = s32[] maximum(a, b) }\n";

/* FSDP's gathered f32 weights of a default-precision dot move as bf16 on the tpu backend
 * (bf16_dot_gathers): converted before the all-gather, back after, and the chip's values
 * are bit-identical to its unpartitioned run (the MXU's one bf16 pass rounds the same). */
static void check_bf16_gathers(void) {
  const char *src = MESH "ENTRY e {\n x = f32[8,16] parameter(0), " SDY("[{\\\"x\\\"}, {}]") "\n"
                         " w = f32[16,8] parameter(1), " SDY("[{\\\"x\\\",\\\"y\\\"}, {}]") "\n"
                         " ROOT h = f32[8,8] dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n}\n";
  tpu_module *ref = parse(src), *m = parse(src);
  tpu_chip chip;
  tpu_diag d;
  CHECK(ref && m && tpu_chip_load("v5e", &chip, &d) == TPU_OK);
  if (!ref || !m) goto done;
  tpu_tensor args[2], want, got;
  for (int i = 0; i < 2; i++) {
    const tpu_shape *s = &ref->entry->params[i]->shape;
    tpu_tensor_alloc(&args[i], s->dtype, s->rank, s->dims, &d);
    for (int64_t k = 0; k < tpu_tensor_numel(&args[i]); k++) /* not exact in bf16 */
      tpu_tensor_set_f64(&args[i], k, ((k * 37 + i * 11) % 101) / 7.3 - 6.1);
  }
  tpu_mesh mesh;
  int found;
  CHECK(tpu_mesh_from_module(m, &mesh, &found, &d) == TPU_OK && found);
  mesh.bf16_dot_gathers = 1;
  CHECK(tpu_spmd_partition(m, &mesh, &d) == TPU_OK);
  tpu_mesh_free(&mesh);
  int to_bf16 = 0;
  for (int i = 0; i < m->entry->ninstrs; i++) {
    const tpu_instr *in = m->entry->instrs[i];
    if (in->op == TPU_OP_ALL_GATHER) to_bf16 += in->operands[0]->op == TPU_OP_CONVERT && in->shape.dtype == TPU_BF16;
  }
  CHECK(to_bf16 == 1);
  CHECK(tpu_chip_run_values(ref, &chip, -1, args, 2, &want, &d) == TPU_OK);
  tpu_podio pc;
  CHECK(tpu_podio_prepare(m, NULL, 0, &pc, &d) == TPU_OK);
  CHECK(tpu_podio_values(&pc, m, &chip, -1, args, 2, NULL, &got, NULL, &d) == TPU_OK);
  CHECK(got.nbytes == want.nbytes && !memcmp(got.data, want.data, want.nbytes));
  tpu_tensor_free(&got);
  tpu_tensor_free(&want);
  tpu_podio_free(&pc);
  for (int i = 0; i < 2; i++) tpu_tensor_free(&args[i]);
done:
  tpu_module_free(ref);
  tpu_module_free(m);
}

/* Windowed einsum: on a mesh of 8 devices (at the threshold) a weight split over all of them
 * along its contraction (FSDP) or its output features, gathered for one dot, is passed round
 * the ring instead: a loop of collective-permutes (one before it, four in its body: two steps
 * each way per iteration, as in XLA's compiled programs), no all-gather, values equal (s32:
 * exact whatever the order of the partial sums). In a program below the chip's smallest slice, or with the weight read
 * by a second dot, it is gathered. */
/* A mesh axis of one device splits nothing: a result wanted as {devices=[8,1]<=[8]} on a
 * mesh data=1 x model=8 is the model split it is computed with (read as (data, model) it
 * differed, and the result was gathered and sliced again: gqa_tp_step_v6e_2x4). */
static void check_unit_axis(void) {
  const char *src =
      "HloModule m, frontend_attributes={xla.sdy.meshes={mesh = #sdy.mesh<[\"data\"=1, \"model\"=8]>}}\n"
      "ENTRY e {\n x = s32[16,8] parameter(0), frontend_attributes={xla.sdy.sharding=\"#sdy.sharding<@mesh, "
      "[{\\\"model\\\"}, {}]>\"}\n ROOT n = s32[16,8] negate(x), sharding={devices=[8,1]<=[8]}\n}\n";
  int devices = g_devices;
  g_devices = 8;
  check_ref("output split over a mesh with an axis of one device", src, src, 0, 0, 0);
  CHECK_EQ_INT(count_after(src, TPU_OP_ALL_GATHER), 0);
  CHECK_EQ_INT(count_after(src, TPU_OP_DYNAMIC_SLICE), 0);
  g_devices = devices;
}

static void check_windowed(void) {
  char src[2048];
  const char *mesh8 = "HloModule m, frontend_attributes={xla.sdy.meshes={mesh = #sdy.mesh<[\"f\"=8]>}}\n";
  const char *wk = "[{\\\"f\\\"}, {}]", *wn = "[{}, {\\\"f\\\"}]";
  for (int k = 0; k < 2; k++) {
    snprintf(src, sizeof src,
             "%sENTRY e {\n x = s32[16,8] parameter(0), frontend_attributes={xla.sdy.sharding=\"#sdy.sharding<@mesh, "
             "[{\\\"f\\\"}, {}]>\"}\n w = s32[8,16] parameter(1), frontend_attributes={xla.sdy.sharding=\"#sdy.sharding<@mesh, %s>\"}\n"
             " h = s32[16,16] dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n ROOT r = s32[16,16] negate(h)\n}\n",
             mesh8, k ? wn : wk);
    g_devices = 8;
    g_window = 8;
    check_ref(k ? "windowed einsum over output features" : "windowed einsum over the contraction", src, src, 0, 0, 0);
    CHECK_EQ_INT(count_after(src, TPU_OP_COLLECTIVE_PERMUTE), 5);
    CHECK_EQ_INT(count_after(src, TPU_OP_WHILE), 1);
    /* one dot per ring step over both blocks held (XLA's bidirectional loop concatenates the
     * block arrived each way): two per iteration, not one per block */
    CHECK_EQ_INT(count_after(src, TPU_OP_DOT), 2);
    CHECK_EQ_INT(count_after(src, TPU_OP_CONCATENATE), k ? 2 : 4);
    g_window = 16; /* below the threshold: gathered */
    CHECK_EQ_INT(count_after(src, TPU_OP_ALL_GATHER), 1);
    CHECK_EQ_INT(count_after(src, TPU_OP_WHILE), 0);
    g_window = g_window_max = 4; /* above the largest slice that makes them: gathered */
    CHECK_EQ_INT(count_after(src, TPU_OP_WHILE), 0);
    g_window_max = 8;
    CHECK_EQ_INT(count_after(src, TPU_OP_WHILE), 1);
    g_window_max = 0;
  }
  /* a weight gradient (the batch contracted) that the update takes split like the weight:
   * its partial sums pass round the ring both ways, each chip adding its product for the
   * block the sum is travelling to (two permutes each way per iteration, one after the
   * loop), not a reduce-scatter */
  snprintf(src, sizeof src,
           "%sENTRY e {\n x = s32[16,8] parameter(0), frontend_attributes={xla.sdy.sharding=\"#sdy.sharding<@mesh, "
           "[{\\\"f\\\"}, {}]>\"}\n dy = s32[16,16] parameter(1), frontend_attributes={xla.sdy.sharding=\"#sdy.sharding<@mesh, "
           "[{\\\"f\\\"}, {}]>\"}\n w = s32[8,16] parameter(2), frontend_attributes={xla.sdy.sharding=\"#sdy.sharding<@mesh, %s>\"}\n"
           " g = s32[8,16] dot(x, dy), lhs_contracting_dims={0}, rhs_contracting_dims={0}\n ROOT r = s32[8,16] subtract(w, g)\n}\n",
           mesh8, wk);
  g_window = 8;
  check_ref("windowed reduce-scatter", src, src, 0, 0, 0);
  CHECK_EQ_INT(count_after(src, TPU_OP_COLLECTIVE_PERMUTE), 5);
  CHECK_EQ_INT(count_after(src, TPU_OP_WHILE), 1);
  CHECK_EQ_INT(count_after(src, TPU_OP_DOT), 2); /* both sums' products in one dot per step */
  CHECK_EQ_INT(count_after(src, TPU_OP_REDUCE_SCATTER), 0);
  g_window = 0;
  CHECK_EQ_INT(count_after(src, TPU_OP_REDUCE_SCATTER), 1);
  /* XLA's test of a loop's worth (its dot handler's disable_windowed_einsum): the loop takes
   * max(C, M) + 2M/n where the dot and the gather one after the other take C + M. A weight
   * gathered for 64 rows a chip (C far below 2M/n) is gathered; for 2048 rows (C above 2M/n,
   * below M) it loops. Partitioned only: the arrays are large. */
  const char *big = "%sENTRY e {\n x = s32[%d,512] parameter(0), frontend_attributes={xla.sdy.sharding=\"#sdy.sharding<@mesh, "
                    "[{\\\"f\\\"}, {}]>\"}\n w = s32[512,256] parameter(1), frontend_attributes={xla.sdy.sharding=\"#sdy.sharding<@mesh, "
                    "%s>\"}\n h = s32[%d,256] dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n"
                    " ROOT r = s32[%d,256] negate(h)\n}\n";
  g_window = 8;
  snprintf(src, sizeof src, big, mesh8, 512, wk, 512, 512);
  CHECK_EQ_INT(count_after(src, TPU_OP_WHILE), 0);
  CHECK_EQ_INT(count_after(src, TPU_OP_ALL_GATHER), 1);
  snprintf(src, sizeof src, big, mesh8, 16384, wk, 16384, 16384);
  CHECK_EQ_INT(count_after(src, TPU_OP_WHILE), 1);
  CHECK_EQ_INT(count_after(src, TPU_OP_ALL_GATHER), 0);
  /* a ring over part of the mesh: a weight split along its contraction over f and its outputs
   * over a, x split over f: the ring is the 8 devices of f beside each chip (XLA's windowed
   * einsums over part of the mesh: SUMMA, sequence-parallel Megatron) */
  const char *part = "HloModule m, frontend_attributes={xla.sdy.meshes={mesh = #sdy.mesh<[\"a\"=2, \"f\"=8]>}}\n"
                     "ENTRY e {\n x = s32[32,8] parameter(0), frontend_attributes={xla.sdy.sharding=\"#sdy.sharding<@mesh, "
                     "[%s, {}]>\"}\n w = s32[8,16] parameter(1), frontend_attributes={xla.sdy.sharding=\"#sdy.sharding<@mesh, "
                     "[{\\\"f\\\"}, %s]>\"}\n h = s32[32,16] dot(x, w), lhs_contracting_dims={1}, "
                     "rhs_contracting_dims={0}\n ROOT r = s32[32,16] negate(h)\n}\n";
  snprintf(src, sizeof src, part, "{\\\"f\\\"}", "{\\\"a\\\"}");
  g_devices = 16;
  check_ref("windowed einsum round part of the mesh", src, src, 0, 0, 0);
  CHECK_EQ_INT(count_after(src, TPU_OP_WHILE), 1);
  CHECK_EQ_INT(count_after(src, TPU_OP_COLLECTIVE_PERMUTE), 5);
  /* x split over a and f, the weight over f alone: the dot's group is all 16 devices, the
   * weight's ring 8 of them, and XLA gathers the weight over f (bench/spmd/probe_windowed.py:
   * "over half" of every slice gathers) */
  snprintf(src, sizeof src, part, "{\\\"a\\\", \\\"f\\\"}", "{}");
  CHECK_EQ_INT(count_after(src, TPU_OP_WHILE), 0);
  CHECK_EQ_INT(count_after(src, TPU_OP_ALL_GATHER), 1);
  g_devices = 8;
  /* weight gradients (one per example of a batch split over a) reduce-scattered round a ring
   * of 4 (the f axis of a 2 x 4 mesh of a program of 8 devices, the chip's smallest ring): a
   * loop only with the chip's ring-of-4 multiplier k (XLA's test with the loop's communication
   * times k; libtpu's reduce-scatters round 4 v5e devices, bench/spmd/probe_ring4.py), and then
   * as XLA's test with k says: C/M = 0.59 reduce-scatters at k = 1.1 (it would loop at k = 1),
   * 1.25 loops. The same sum without the batch (the dot repeated over a, its 4 ring devices
   * not all its partitions: bench/spmd/cases gemm_contract_split) reduce-scatters. */
  const char *r4 = "HloModule m, frontend_attributes={xla.sdy.meshes={mesh = #sdy.mesh<[\"a\"=2, \"f\"=4]>}}\n"
                   "ENTRY e {\n x = s32[2,%d,%d] parameter(0), frontend_attributes={xla.sdy.sharding=\"#sdy.sharding<@mesh, "
                   "[%s, {\\\"f\\\"}, {}]>\"}\n dy = s32[2,%d,%d] parameter(1), frontend_attributes={xla.sdy.sharding=\"#sdy.sharding<@mesh, "
                   "[%s, {\\\"f\\\"}, {}]>\"}\n w = s32[2,%d,%d] parameter(2), frontend_attributes={xla.sdy.sharding=\"#sdy.sharding<@mesh, "
                   "[%s, {\\\"f\\\"}, {}]>\"}\n g = s32[2,%d,%d] dot(x, dy), lhs_batch_dims={0}, rhs_batch_dims={0}, "
                   "lhs_contracting_dims={1}, rhs_contracting_dims={1}\n ROOT r = s32[2,%d,%d] subtract(w, g)\n}\n";
  const char *ba = "{\\\"a\\\"}";
  snprintf(src, sizeof src, r4, 16, 8, ba, 16, 16, ba, 8, 16, ba, 8, 16, 8, 16);
  g_window = 8;
  g_ring4 = 0;
  CHECK_EQ_INT(count_after(src, TPU_OP_WHILE), 0);
  CHECK_EQ_INT(count_after(src, TPU_OP_REDUCE_SCATTER), 1);
  g_ring4 = 1.1;
  check_ref("windowed reduce-scatter round 4 devices", src, src, 0, 0, 0);
  CHECK_EQ_INT(count_after(src, TPU_OP_WHILE), 1);
  CHECK_EQ_INT(count_after(src, TPU_OP_COLLECTIVE_PERMUTE), 5);
  CHECK_EQ_INT(count_after(src, TPU_OP_REDUCE_SCATTER), 0);
  g_window = 16; /* a program of fewer devices than the chip's smallest ring: no loop */
  CHECK_EQ_INT(count_after(src, TPU_OP_WHILE), 0);
  g_window = 8;
  snprintf(src, sizeof src, r4, 16, 8, "{}", 16, 16, "{}", 8, 16, "{}", 8, 16, 8, 16);
  CHECK_EQ_INT(count_after(src, TPU_OP_WHILE), 0);
  snprintf(src, sizeof src, r4, 7680, 64, ba, 7680, 64, ba, 64, 64, ba, 64, 64, 64, 64);
  CHECK_EQ_INT(count_after(src, TPU_OP_WHILE), 0);
  g_ring4 = 1;
  CHECK_EQ_INT(count_after(src, TPU_OP_WHILE), 1);
  g_ring4 = 1.1;
  snprintf(src, sizeof src, r4, 16384, 64, ba, 16384, 64, ba, 64, 64, ba, 64, 64, 64, 64);
  CHECK_EQ_INT(count_after(src, TPU_OP_WHILE), 1);
  g_ring4 = 0;
  g_window = 0;
  g_devices = 8;
  /* the weight read by two dots: gathered once for both */
  snprintf(src, sizeof src,
           "%sENTRY e {\n x = s32[16,8] parameter(0), frontend_attributes={xla.sdy.sharding=\"#sdy.sharding<@mesh, "
           "[{\\\"f\\\"}, {}]>\"}\n w = s32[8,16] parameter(1), frontend_attributes={xla.sdy.sharding=\"#sdy.sharding<@mesh, %s>\"}\n"
           " h = s32[16,16] dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n"
           " g = s32[16,8] dot(h, w), lhs_contracting_dims={1}, rhs_contracting_dims={1}\n ROOT r = s32[16,8] negate(g)\n}\n",
           mesh8, wk);
  g_window = 8;
  CHECK_EQ_INT(count_after(src, TPU_OP_WHILE), 0);
  g_window = 0;
  g_devices = 4;
}

int main(void) {
  char src[4096];
  /* Data parallel: the batch split over x and y, weights replicated: no communication. */
  snprintf(src, sizeof src,
           MESH "ENTRY e {\n x = s32[8,6] parameter(0), " SDY("[{\\\"x\\\",\\\"y\\\"}, {}]") "\n"
           " w = s32[6,5] parameter(1), " SDY("[{}, {}]") "\n"
           " h = s32[8,5] dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n"
           " ROOT r = s32[8,5] negate(h)\n}\n");
  check("data parallel", src, 0, 0, 0);
  /* Megatron MLP: column-parallel then row-parallel over y; one all-reduce. */
  snprintf(src, sizeof src,
           MESH "ENTRY e {\n x = s32[4,6] parameter(0), " SDY("[{\\\"x\\\"}, {}]") "\n"
           " w1 = s32[6,8] parameter(1), " SDY("[{}, {\\\"y\\\"}]") "\n"
           " w2 = s32[8,6] parameter(2), " SDY("[{\\\"y\\\"}, {}]") "\n"
           " h = s32[4,8] dot(x, w1), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n"
           " a = s32[4,8] abs(h)\n"
           " ROOT o = s32[4,6] dot(a, w2), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n}\n");
  check("tensor parallel", src, 1, 0, 0);
  {
    /* A data-parallel weight gradient for a weight split over y (FSDP-style update): both
     * operands split along the contracted batch over x, so the chip sums its partial
     * products over x (all-reduce) as XLA's partitioner does, rather than gathering the
     * batch, though the batch is the smaller array here; and since the update takes the
     * chip's block of the weight, the dot computes only that block (the activation's free
     * dimension sliced over y): the all-reduce carries [4,6], not [8,6]. */
    const char *g = MESH "ENTRY e {\n a = s32[4,8] parameter(0), " SDY("[{\\\"x\\\"}, {}]") "\n"
                    " g = s32[4,6] parameter(1), " SDY("[{\\\"x\\\"}, {}]") "\n"
                    " w = s32[8,6] parameter(2), " SDY("[{\\\"y\\\"}, {}]") "\n"
                    " d = s32[8,6] dot(a, g), lhs_contracting_dims={0}, rhs_contracting_dims={0}\n"
                    " ROOT u = s32[8,6] subtract(w, d)\n}\n";
    check("data-parallel gradient of a split weight", g, 1, 0, 0);
    tpu_module *m = parse(g);
    tpu_diag d;
    if (m && partition(m, &d) == TPU_OK)
      for (int i = 0; i < m->entry->ninstrs; i++)
        if (m->entry->instrs[i]->op == TPU_OP_ALL_REDUCE) {
          CHECK_EQ_INT(m->entry->instrs[i]->shape.dims[0], 4);
          CHECK_EQ_INT(m->entry->instrs[i]->shape.dims[1], 6);
        }
    tpu_module_free(m);
  }
  /* An MLP with the batch split over x and both weights split along their rows over y (the
   * first matmul contracts the first weight's split rows): the second matmul's weight split
   * passes to the hidden activation, as XLA's propagation carries it, so the first weight
   * moves to its columns by one all-to-all, the hidden layer stays split over y, and the
   * second matmul's partial sums over y are one all-reduce — no weight is gathered (the
   * batch of 16 rows makes moving the first weight cheaper than summing its products). */
  snprintf(src, sizeof src,
           MESH "ENTRY e {\n x = s32[16,8] parameter(0), " SDY("[{\\\"x\\\"}, {}]") "\n"
           " w1 = s32[8,8] parameter(1), " SDY("[{\\\"y\\\"}, {}]") "\n"
           " w2 = s32[8,6] parameter(2), " SDY("[{\\\"y\\\"}, {}]") "\n"
           " h = s32[16,8] dot(x, w1), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n"
           " a = s32[16,8] abs(h)\n"
           " ROOT o = s32[16,6] dot(a, w2), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n}\n");
  check("weights split along their rows on a 2-D mesh", src, 1, 0, 0);
  CHECK_EQ_INT(count_after(src, TPU_OP_ALL_TO_ALL), 1);
  /* A weight gradient whose output gradient is split along the weight's columns (y) while
   * the update, scaled by a learning rate, takes the weight's row block: the use's split is
   * carried back to the dot (through the scaling), which gathers the output gradient over y
   * and sums only the chip's row block, as XLA's partitioner does, instead of summing the
   * column block and moving it to rows by all-to-all (the batch of 4 is smaller than the
   * weight's 16 rows: the gather moves fewer bytes than the all-to-all would). */
  snprintf(src, sizeof src,
           MESH "ENTRY e {\n a = s32[4,16] parameter(0), " SDY("[{\\\"x\\\"}, {}]") "\n"
           " g = s32[4,8] parameter(1), " SDY("[{\\\"x\\\"}, {\\\"y\\\"}]") "\n"
           " w = s32[16,8] parameter(2), " SDY("[{\\\"y\\\"}, {}]") "\n"
           " d = s32[16,8] dot(a, g), lhs_contracting_dims={0}, rhs_contracting_dims={0}\n"
           " k = s32[] constant(3)\n kb = s32[16,8] broadcast(k), dimensions={}\n"
           " ds = s32[16,8] multiply(d, kb)\n"
           " ROOT u = s32[16,8] subtract(w, ds)\n}\n");
  check("weight gradient summed for the update's block", src, 1, 1, 0);
  CHECK_EQ_INT(count_after(src, TPU_OP_ALL_TO_ALL), 0);
  {
    /* GSPMD form: the program's output shardings written on its root (a tuple's per
     * element) are what each chip returns — a further split sliced on each chip, a whole
     * result gathered. */
    const char *t1 = "HloModule m\nENTRY e {\n x = s32[8,4] parameter(0), sharding={devices=[2,1,2]<=[4] last_tile_dim_replicate}\n"
                     " z = s32[8,4] add(x, x)\n ROOT t = (s32[8,4]) tuple(z), sharding={{devices=[2,2]<=[4]}}\n}\n";
    check("output sharding on the root tuple", t1, 0, 0, 0);
    tpu_module *m = parse(t1);
    tpu_diag d;
    if (m && partition(m, &d) == TPU_OK) {
      const tpu_shape *r = &m->entry->root->shape;
      CHECK(r->dtype == TPU_TUPLE && r->ntuple == 1 && r->elems[0].dims[0] == 4 && r->elems[0].dims[1] == 2);
    }
    tpu_module_free(m);
    const char *t2 = "HloModule m\nENTRY e {\n x = s32[8,4] parameter(0), sharding={devices=[2,1,2]<=[4] last_tile_dim_replicate}\n"
                     " ROOT z = s32[8,4] negate(x), sharding={replicated}\n}\n";
    check("whole output on the root", t2, 0, 1, 0);
  }
  /* A split reduction (max over a split dimension) and a split value used whole. */
  snprintf(src, sizeof src,
           MESH "%s%sENTRY e {\n x = s32[8,4] parameter(0), " SDY("[{\\\"x\\\"}, {\\\"y\\\"}]") "\n"
           " z = s32[] constant(-2147483648)\n"
           " m = s32[4] reduce(x, z), dimensions={0}, to_apply=mx\n"
           " t = s32[4,8] transpose(x), dimensions={1,0}\n"
           " r = s32[32] reshape(t)\n"
           " c = s32[] constant(0)\n"
           " s = s32[] reduce(r, c), dimensions={0}, to_apply=add\n"
           " sl = s32[2,8] slice(t), slice={[1:3], [0:8]}\n"
           " ROOT o = (s32[4], s32[], s32[2,8], s32[4,8]) tuple(m, s, sl, t)\n}\n",
           k_max, k_add);
  check("reduce, reshape, slice", src, 2, 2, 0);
  /* A data-parallel CNN piece: convolution, pad and concatenate keep the batch split. */
  snprintf(src, sizeof src,
           MESH "ENTRY e {\n x = f32[4,6,6,2] parameter(0), " SDY("[{\\\"x\\\",\\\"y\\\"}, {}, {}, {}]") "\n"
           " k = f32[3,3,2,2] parameter(1)\n"
           " c = f32[4,4,4,2] convolution(x, k), window={size=3x3}, dim_labels=b01f_01io->b01f\n"
           " z = f32[] constant(0)\n"
           " p = f32[4,6,6,2] pad(c, z), padding=0_0x1_1x1_1x0_0\n"
           " ROOT cc = f32[4,6,6,4] concatenate(p, x), dimensions={3}\n}\n");
  check("convolution, pad, concatenate", src, 0, 0, 0);
  /* P(x, _) -> P(y, x): every chip wants a quarter of the rows that a chip of the other x
   * half holds: that chip sends the quarter (all columns) by one collective-permute and the
   * receiver takes its column half, as XLA's partitioner reshards it, instead of gathering
   * the rows. */
  snprintf(src, sizeof src,
           MESH "ENTRY e {\n x = s32[8,4] parameter(0), " SDY("[{\\\"x\\\"}, {}]") "\n"
           " a = s32[8,4] negate(x)\n"
           " ROOT c = s32[8,4] custom-call(a), custom_call_target=\"Sharding\", sharding={devices=[2,2]<=[2,2]T(1,0)}\n}\n");
  check("a split refined onto other chips", src, 0, 0, 0);
  CHECK_EQ_INT(count_after(src, TPU_OP_COLLECTIVE_PERMUTE), 1);
  /* P(x, y) -> P(_, (x, y)): x leaves the rows for the major end of the columns: one
   * all-to-all over x (which puts it at the minor end, (y, x)) and one collective-permute
   * of the blocks to their chips, as XLA's partitioner reshards it, instead of gathering. */
  snprintf(src, sizeof src,
           MESH "ENTRY e {\n x = s32[8,8] parameter(0), " SDY("[{\\\"x\\\"}, {\\\"y\\\"}]") "\n"
           " a = s32[8,8] negate(x)\n"
           " ROOT c = s32[8,8] custom-call(a), custom_call_target=\"Sharding\", sharding={devices=[1,4]<=[4]}\n}\n");
  check("an axis moved to the major end of another dimension", src, 0, 0, 0);
  CHECK_EQ_INT(count_after(src, TPU_OP_ALL_TO_ALL), 1);
  CHECK_EQ_INT(count_after(src, TPU_OP_COLLECTIVE_PERMUTE), 1);
  /* P(x, y) -> P((x, y), _): y leaves the columns, which keep nothing, for the minor end of
   * the rows' split: one all-to-all over y, as XLA's partitioner does. */
  snprintf(src, sizeof src,
           MESH "ENTRY e {\n x = s32[8,8] parameter(0), " SDY("[{\\\"x\\\"}, {\\\"y\\\"}]") "\n"
           " a = s32[8,8] negate(x)\n"
           " ROOT c = s32[8,8] custom-call(a), custom_call_target=\"Sharding\", sharding={devices=[4,1]<=[4]}\n}\n");
  check("an axis moved to the minor end of another dimension", src, 0, 0, 0);
  CHECK_EQ_INT(count_after(src, TPU_OP_ALL_TO_ALL), 1);
  CHECK_EQ_INT(count_after(src, TPU_OP_COLLECTIVE_PERMUTE), 0);
  /* Microbatches cut from a batch split over every chip (x.reshape(2, B/2, d) over 4):
   * the reshape cuts the mesh axis in two (2 x 2, as XLA's sub-axes) — microbatches over the
   * major part, each one's rows over the minor — so no gather; the sum over a microbatch's
   * rows is one all-reduce over the minor part. */
  snprintf(src, sizeof src,
           "HloModule m, frontend_attributes={xla.sdy.meshes={mesh = #sdy.mesh<[\"d\"=4]>}}\n"
           "%sENTRY e {\n x = s32[16,3] parameter(0), " SDY("[{\\\"d\\\"}, {}]") "\n"
           " r = s32[2,8,3] reshape(x)\n c = s32[] constant(0)\n"
           " ROOT s = s32[2,3] reduce(r, c), dimensions={1}, to_apply=add\n}\n",
           k_add);
  check("microbatches over part of a mesh axis", src, 1, 0, 0);
  check_windowed();
  check_unit_axis();
  {
    /* A broadcast of a split vector (a norm's scale) used with a batch-split activation:
     * the vector is gathered (4 elements) and broadcast on each chip, not the broadcast
     * moved by all-to-all. */
    const char *b4 = "HloModule m, frontend_attributes={xla.sdy.meshes={mesh = #sdy.mesh<[\"f\"=4]>}}\n"
                     "ENTRY e {\n x = s32[8,4] parameter(0), frontend_attributes={xla.sdy.sharding=\"#sdy.sharding<@mesh, "
                     "[{\\\"f\\\"}, {}]>\"}\n v = s32[4] parameter(1), frontend_attributes={xla.sdy.sharding=\"#sdy.sharding<@mesh, "
                     "[{\\\"f\\\"}]>\"}\n b = s32[8,4] broadcast(v), dimensions={1}\n ROOT r = s32[8,4] multiply(x, b)\n}\n";
    check("broadcast resharded through its operand", b4, 0, 1, 0);
    CHECK_EQ_INT(count_after(b4, TPU_OP_ALL_TO_ALL), 0);
    tpu_module *m = parse(b4);
    tpu_diag d;
    if (m && partition(m, &d) == TPU_OK)
      for (int i = 0; i < m->entry->ninstrs; i++)
        if (m->entry->instrs[i]->op == TPU_OP_ALL_GATHER) CHECK_EQ_INT(m->entry->instrs[i]->shape.rank, 1);
    tpu_module_free(m);
  }
  /* A tensor-parallel convolution: filters split along their output features over y, the
   * batch over x; each chip convolves its batch block with its filters, no collective. */
  snprintf(src, sizeof src,
           MESH "ENTRY e {\n x = f32[4,6,6,2] parameter(0), " SDY("[{\\\"x\\\"}, {}, {}, {}]") "\n"
           " k = f32[3,3,2,4] parameter(1), " SDY("[{}, {}, {}, {\\\"y\\\"}]") "\n"
           " ROOT c = f32[4,4,4,4] convolution(x, k), window={size=3x3}, dim_labels=b01f_01io->b01f\n}\n");
  check("convolution over output features", src, 0, 0, 0);
  CHECK_EQ_INT(count_after(src, TPU_OP_COLLECTIVE_PERMUTE) + count_after(src, TPU_OP_ALL_TO_ALL), 0);
  /* with_sharding_constraint (a Sharding custom call) moving a value from x to y splits. */
  snprintf(src, sizeof src,
           MESH "ENTRY e {\n x = s32[8,8] parameter(0), " SDY("[{\\\"x\\\"}, {}]") "\n"
           " c = s32[8,8] custom-call(x), custom_call_target=\"Sharding\", sharding={devices=[1,2,2]<=[2,2]T(1,0) last_tile_dim_replicate}\n"
           " ROOT n = s32[8,8] multiply(c, c)\n}\n");
  {
    /* The unpartitioned reference: the same program with the annotation as a copy. */
    char ref[4096];
    snprintf(ref, sizeof ref,
             MESH "ENTRY e {\n x = s32[8,8] parameter(0), " SDY("[{\\\"x\\\"}, {}]") "\n"
             " c = s32[8,8] copy(x)\n ROOT n = s32[8,8] multiply(c, c)\n}\n");
    check_ref("sharding constraint", src, ref, 0, 1, 0);
  }
  /* shard_map: a psum inside a manual region over x. */
  snprintf(src, sizeof src,
           MESH "%sENTRY e {\n x = s32[8,4] parameter(0), " SDY("[{\\\"x\\\"}, {}]") "\n"
           " s = s32[8,4] custom-call(x), custom_call_target=\"Sharding\", sharding={devices=[2,1,2]<=[4] last_tile_dim_replicate}\n"
           " l = s32[4,4] custom-call(s), custom_call_target=\"SPMDFullToShardShape\", sharding={manual}\n"
           " p = s32[4,4] all-reduce(l), channel_id=1, replica_groups={{0,2},{1,3}}, use_global_device_ids=true, to_apply=add\n"
           " q = s32[4,4] custom-call(p), custom_call_target=\"Sharding\", sharding={manual}\n"
           " ROOT f = s32[8,4] custom-call(q), custom_call_target=\"SPMDShardToFullShape\", sharding={devices=[2,1,2]<=[4] last_tile_dim_replicate}\n}\n",
           k_add);
  {
    /* Its unpartitioned run needs the pod (the psum spans chips): check values by hand. */
    tpu_module *m = parse(src);
    tpu_diag d;
    CHECK(m && tpu_spmd_partition(m, NULL, &d) == TPU_OK);
    tpu_podio pc;
    if (m && tpu_podio_prepare(m, NULL, 0, &pc, &d) == TPU_OK) {
      tpu_tensor x, out;
      int64_t dims[2] = {8, 4};
      tpu_tensor_alloc(&x, TPU_S32, 2, dims, &d);
      for (int i = 0; i < 32; i++) tpu_tensor_set_i64(&x, i, i);
      CHECK(tpu_podio_values(&pc, m, NULL, -1, &x, 1, NULL, &out, NULL, &d) == TPU_OK);
      /* Each block of 4 rows is summed with the other block: out = x[i%4] + x[i%4 + 4] per row. */
      for (int r = 0; r < 8 && out.data; r++)
        for (int c = 0; c < 4; c++) CHECK(tpu_tensor_get_i64(&out, r * 4 + c) == (r % 4) * 4 + c + (r % 4 + 4) * 4 + c);
      tpu_tensor_free(&out);
      tpu_tensor_free(&x);
      tpu_podio_free(&pc);
    }
    tpu_module_free(m);
  }
  /* A loop (lax.scan / fori_loop) keeps its state split: the batch stays on x and y
   * through every iteration; the per-iteration sum over the split batch is one
   * all-reduce inside the body. */
  snprintf(src, sizeof src,
           MESH "%s"
           "cond { s = (s32[], s32[8,4], s32[4,4], s32[4]) parameter(0)\n i = s32[] get-tuple-element(s), index=0\n"
           " n = s32[] constant(3)\n ROOT c = pred[] compare(i, n), direction=LT }\n"
           "body { s = (s32[], s32[8,4], s32[4,4], s32[4]) parameter(0)\n i = s32[] get-tuple-element(s), index=0\n"
           " x = s32[8,4] get-tuple-element(s), index=1\n w = s32[4,4] get-tuple-element(s), index=2\n"
           " a = s32[4] get-tuple-element(s), index=3\n"
           " h = s32[8,4] dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n"
           " k = s32[] constant(7)\n kb = s32[8,4] broadcast(k), dimensions={}\n x2 = s32[8,4] remainder(h, kb)\n"
           " z = s32[] constant(0)\n r = s32[4] reduce(x2, z), dimensions={0}, to_apply=add\n"
           " a2 = s32[4] add(a, r)\n one = s32[] constant(1)\n i2 = s32[] add(i, one)\n"
           " ROOT t = (s32[], s32[8,4], s32[4,4], s32[4]) tuple(i2, x2, w, a2) }\n"
           "ENTRY e {\n x = s32[8,4] parameter(0), " SDY("[{\\\"x\\\",\\\"y\\\"}, {}]") "\n"
           " w = s32[4,4] parameter(1)\n z = s32[] constant(0)\n a = s32[4] broadcast(z), dimensions={}\n"
           " t = (s32[], s32[8,4], s32[4,4], s32[4]) tuple(z, x, w, a)\n"
           " l = (s32[], s32[8,4], s32[4,4], s32[4]) while(t), condition=cond, body=body\n"
           " xo = s32[8,4] get-tuple-element(l), index=1\n ao = s32[4] get-tuple-element(l), index=3\n"
           " ROOT o = (s32[8,4], s32[4]) tuple(xo, ao)\n}\n",
           k_add);
  check("while loop", src, 1, 0, 0);
  /* A scan over layers whose stacked weights are split along their rows over y, the state
   * along the batch over x: the state takes the weights' split along its features too (as
   * XLA's propagation carries it into the loop), so each layer's matmul sums its partial
   * products over y (one all-reduce in the body, of which each chip keeps its block) where
   * tpusim had gathered each layer's weight. */
  snprintf(src, sizeof src,
           MESH
           "cond { s = (s32[], s32[8,4], s32[3,4,4]) parameter(0)\n i = s32[] get-tuple-element(s), index=0\n"
           " n = s32[] constant(3)\n ROOT c = pred[] compare(i, n), direction=LT }\n"
           "body { s = (s32[], s32[8,4], s32[3,4,4]) parameter(0)\n i = s32[] get-tuple-element(s), index=0\n"
           " x = s32[8,4] get-tuple-element(s), index=1\n ws = s32[3,4,4] get-tuple-element(s), index=2\n"
           " z = s32[] constant(0)\n d = s32[1,4,4] dynamic-slice(ws, i, z, z), dynamic_slice_sizes={1,4,4}\n"
           " w = s32[4,4] reshape(d)\n h = s32[8,4] dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n"
           " a = s32[8,4] abs(h)\n one = s32[] constant(1)\n i2 = s32[] add(i, one)\n"
           " ROOT t = (s32[], s32[8,4], s32[3,4,4]) tuple(i2, a, ws) }\n"
           "ENTRY e {\n x = s32[8,4] parameter(0), " SDY("[{\\\"x\\\"}, {}]") "\n"
           " ws = s32[3,4,4] parameter(1), " SDY("[{}, {\\\"y\\\"}, {}]") "\n z = s32[] constant(0)\n"
           " t = (s32[], s32[8,4], s32[3,4,4]) tuple(z, x, ws)\n"
           " l = (s32[], s32[8,4], s32[3,4,4]) while(t), condition=cond, body=body\n"
           " ROOT xo = s32[8,4] get-tuple-element(l), index=1\n}\n");
  check("scan over row-split weights", src, 1, 0, 0);
  /* Floats: a split contraction gives partial sums added in group order. */
  snprintf(src, sizeof src,
           MESH "ENTRY e {\n x = f32[4,8] parameter(0), " SDY("[{}, {\\\"x\\\",\\\"y\\\"}]") "\n"
           " w = f32[8,3] parameter(1), " SDY("[{\\\"x\\\",\\\"y\\\"}, {}]") "\n"
           " ROOT h = f32[4,3] dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n}\n");
  check("split contraction", src, 1, 0, 1e-6);
  /* A weight gradient (partial sums over the split batch) transposed and reshaped before the
   * update takes its block: one reduce-scatter, no all-reduce, no gather. */
  snprintf(src, sizeof src,
           GRAD_XG " w = s32[1,4,6] parameter(2), " SDY("[{}, {\\\"x\\\",\\\"y\\\"}, {}]") "\n" GRAD_DOT
           " t = s32[4,6] transpose(d), dimensions={1,0}\n r = s32[1,4,6] reshape(t)\n"
           " ROOT o = s32[1,4,6] subtract(w, r), " SDY("[{}, {\\\"x\\\",\\\"y\\\"}, {}]") "\n}\n");
  check("gradient moved before its block", src, 0, 0, 0);
  CHECK_EQ_INT(count_after(src, TPU_OP_REDUCE_SCATTER), 1);
  /* A weight gradient scaled by the learning rate, summed over both axes and wanted split
   * over one: a reduce-scatter over that axis, then an all-reduce of the block over the
   * other (FSDP inside data parallelism). */
  snprintf(src, sizeof src,
           GRAD_XG " w = s32[6,4] parameter(2), " SDY("[{\\\"y\\\"}, {}]") "\n" GRAD_DOT
           " c = s32[] constant(3)\n cb = s32[6,4] broadcast(c), dimensions={}\n"
           " sd = s32[6,4] multiply(d, cb)\n"
           " ROOT o = s32[6,4] subtract(w, sd), " SDY("[{\\\"y\\\"}, {}]") "\n}\n");
  check("scaled gradient over part of its axes", src, 1, 0, 0);
  CHECK_EQ_INT(count_after(src, TPU_OP_REDUCE_SCATTER), 1);
  /* An embedding table split along its rows: each chip looks up the rows it holds (indices
   * shifted to its block, the others zeroed) and one all-reduce sums them; the indices keep
   * their batch split. Out-of-range and negative indices clamp as XLA's gather does. */
  snprintf(src, sizeof src,
           MESH "ENTRY e {\n t = s32[8,6] parameter(0), " SDY("[{\\\"y\\\"}, {}]") "\n"
           " i = s32[4,1] parameter(1), " SDY("[{\\\"x\\\"}, {}]") "\n"
           " c = s32[] constant(6)\n cb = s32[4,1] broadcast(c), dimensions={}\n ip = s32[4,1] add(i, cb)\n"
           " ROOT r = s32[4,6] gather(t, ip), offset_dims={1}, collapsed_slice_dims={0}, start_index_map={0},"
           " index_vector_dim=1, slice_sizes={1,6}\n}\n");
  check("vocabulary-split lookup", src, 1, 0, 0);
  /* take_along_axis's gradient (a one-hot scatter into zeros) beside logits split over both
   * axes: the first pass's use gives the scatter a hint, and each chip scatters into its own
   * block of the vocabulary (updates for other chips' rows are skipped) — no slice. */
  snprintf(src, sizeof src,
           MESH "%sENTRY e {\n lg = s32[8,16] parameter(0), " SDY("[{\\\"x\\\"}, {\\\"y\\\"}]") "\n"
           " i = s32[8,1,1] parameter(1), " SDY("[{\\\"x\\\"}, {}, {}]") "\n"
           " u = s32[8,1] parameter(2), " SDY("[{\\\"x\\\"}, {}]") "\n"
           " z = s32[] constant(0)\n o = s32[8,16] broadcast(z), dimensions={}\n"
           " sc = s32[8,16] scatter(o, i, u), update_window_dims={}, inserted_window_dims={1},"
           " scatter_dims_to_operand_dims={1}, input_batching_dims={0}, scatter_indices_batching_dims={0},"
           " index_vector_dim=2, to_apply=add\n"
           " ROOT r = s32[8,16] add(sc, lg)\n}\n",
           k_add);
  check("one-hot scatter split by its use", src, 0, 0, 0);
  CHECK_EQ_INT(count_after(src, TPU_OP_DYNAMIC_SLICE), 0);
  CHECK_EQ_INT(count_after(src, TPU_OP_SCATTER), 1);
  /* One axis moving from a dimension that keeps another to a second dimension (an expert
   * dispatch): [(x, y), -] to [y, x]: a collective-permute puts x last in dimension 0, then
   * one all-to-all over x moves it; no gather. */
  {
    const char *body = " x = s32[8,4] parameter(0), " SDY("[{\\\"x\\\",\\\"y\\\"}, {}]") "\n";
    snprintf(src, sizeof src,
             MESH "ENTRY e {\n%s c = s32[8,4] custom-call(x), custom_call_target=\"Sharding\","
                  " sharding={devices=[2,2]<=[2,2]T(1,0)}\n ROOT n = s32[8,4] multiply(c, c)\n}\n",
             body);
    char ref[2048];
    snprintf(ref, sizeof ref, MESH "ENTRY e {\n%s c = s32[8,4] copy(x)\n ROOT n = s32[8,4] multiply(c, c)\n}\n", body);
    check_ref("one axis to another dimension", src, ref, 0, 0, 0);
    CHECK_EQ_INT(count_after(src, TPU_OP_ALL_TO_ALL), 1);
    CHECK_EQ_INT(count_after(src, TPU_OP_COLLECTIVE_PERMUTE), 1);
  }
  /* The same on a 2x4 mesh, [(x, y), -] to [y, x] (ep_dispatch's): as XLA's partitioner runs
   * it, one all-to-all among the chips holding consecutive rows ({0,1},{2,3},..: neighbours
   * when chips are numbered along the mesh), then one collective-permute to `to`'s chips;
   * the values equal the unpartitioned run's. And with a third mesh axis replicating the
   * value (2x2x2, z unused): each group stays within one z plane. */
  check_dispatch("\"x\"=2, \"y\"=4", " sharding={devices=[4,2]<=[2,4]T(1,0)}", "{{0,1},{2,3},{4,5},{6,7}}");
  check_dispatch("\"x\"=2, \"y\"=2, \"z\"=2",
                 " frontend_attributes={xla.sdy.sharding=\"#sdy.sharding<@mesh, [{\\\"y\\\"}, {\\\"x\\\"}]>\"}",
                 "{{0,2},{1,3},{4,6},{5,7}}");
  /* A weight gradient JAX transposes after the dot (data parallelism: summed over the split
   * batch): folded into the dot as XLA's simplifier does, so the partial sums are computed
   * transposed and all-reduced, with no transpose left to copy; values exact. */
  snprintf(src, sizeof src,
           MESH "ENTRY e {\n x = s32[8,6] parameter(0), " SDY("[{\\\"x\\\",\\\"y\\\"}, {}]") "\n"
                " g = s32[8,4] parameter(1), " SDY("[{\\\"x\\\",\\\"y\\\"}, {}]") "\n"
                " d = s32[6,4] dot(x, g), lhs_contracting_dims={0}, rhs_contracting_dims={0}\n"
                " ROOT t = s32[4,6] transpose(d), dimensions={1,0}\n}\n");
  check("transposed weight gradient", src, 1, 0, 0);
  CHECK_EQ_INT(count_after(src, TPU_OP_TRANSPOSE), 0);
  /* A softmax's row maxima over a split vocabulary of bf16 logits widened to f32: the
   * partial maxima travel as bf16 (exact: each is one of the bf16 values). */
  snprintf(src, sizeof src,
           MESH "mx { a = f32[] parameter(0)\n b = f32[] parameter(1)\n ROOT r = f32[] maximum(a, b) }\n"
                "ENTRY e {\n x = bf16[4,16] parameter(0), " SDY("[{}, {\\\"x\\\",\\\"y\\\"}]") "\n"
                " c = f32[4,16] convert(x)\n i = f32[] constant(-inf)\n"
                " ROOT m = f32[4] reduce(c, i), dimensions={1}, to_apply=mx\n}\n");
  check("bf16 maxima", src, 1, 0, 0);
  CHECK_EQ_INT(count_after(src, TPU_OP_CONVERT), 3); /* the widening, to bf16, back to f32 */
  check_bf16_gathers();
  {
    /* FSDP's weight gradient over every device (the batch and the weight's rows split over
     * x and y): reduce-scattered into the weight's split, or, on a slice where the XLA TPU
     * compiler keeps the all-reduce (keep_full_all_reduce), summed whole with each chip
     * taking its own rows; values exact either way. Over x alone (a group of half the
     * devices) it reduce-scatters even there. */
    const char *g = MESH "ENTRY e {\n a = s32[8,8] parameter(0), " SDY("[{\\\"x\\\",\\\"y\\\"}, {}]") "\n"
                    " g = s32[8,4] parameter(1), " SDY("[{\\\"x\\\",\\\"y\\\"}, {}]") "\n"
                    " w = s32[8,4] parameter(2), " SDY("[{\\\"x\\\",\\\"y\\\"}, {}]") "\n"
                    " d = s32[8,4] dot(a, g), lhs_contracting_dims={0}, rhs_contracting_dims={0}\n"
                    " ROOT u = s32[8,4] subtract(w, d)\n}\n";
    check("weight gradient reduce-scattered over every device", g, 0, 0, 0);
    CHECK_EQ_INT(count_after(g, TPU_OP_REDUCE_SCATTER), 1);
    g_keep_ar = 1;
    check("weight gradient all-reduced whole where the compiler keeps it", g, 1, 0, 0);
    CHECK_EQ_INT(count_after(g, TPU_OP_REDUCE_SCATTER), 0);
    const char *gx = MESH "ENTRY e {\n a = s32[8,8] parameter(0), " SDY("[{\\\"x\\\"}, {}]") "\n"
                     " g = s32[8,4] parameter(1), " SDY("[{\\\"x\\\"}, {}]") "\n"
                     " w = s32[8,4] parameter(2), " SDY("[{\\\"x\\\"}, {}]") "\n"
                     " d = s32[8,4] dot(a, g), lhs_contracting_dims={0}, rhs_contracting_dims={0}\n"
                     " ROOT u = s32[8,4] subtract(w, d)\n}\n";
    check("weight gradient over part of the devices", gx, 0, 0, 0);
    CHECK_EQ_INT(count_after(gx, TPU_OP_REDUCE_SCATTER), 1);
    g_keep_ar = 0;
  }
  {
    /* The slices on which the compiler keeps it (libtpu's programs, docs/spmd.md) */
    static const struct { const char *chip; int64_t n; int keep; } ks[] = {
        {"v5e", 4, 0}, {"v5e", 8, 0}, {"v5e", 16, 1}, {"v5e", 32, 0}, {"v5e", 64, 1}, {"v5e", 128, 0},
        {"v5e", 256, 1}, {"v6e", 8, 0}, {"v6e", 64, 1}, {"v5p", 4, 0}, {"v5p", 8, 1}, {"v5p", 32, 1},
        {"v5p", 64, 1}, {"v5p", 128, 1}, {"v5p", 1, 0}};
    for (size_t i = 0; i < sizeof ks / sizeof ks[0]; i++) {
      tpu_chip c;
      tpu_diag d;
      CHECK(tpu_chip_load(ks[i].chip, &c, &d) == TPU_OK);
      if (tpu_spmd_keeps_full_all_reduce(&c, ks[i].n) != ks[i].keep) {
        fprintf(stderr, "%s x %lld: keeps %d, want %d\n", ks[i].chip, (long long)ks[i].n,
                tpu_spmd_keeps_full_all_reduce(&c, ks[i].n), ks[i].keep);
        CHECK(0);
      }
    }
    CHECK(!tpu_spmd_keeps_full_all_reduce(NULL, 64));
  }
  CHECK_DONE();
}
