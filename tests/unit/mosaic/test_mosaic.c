/* Pallas/Mosaic kernels (src/mosaic/): the corpus of bench/pallas/corpus runs on the reference
 * interpreter and on the TPU back end's values (tpu.matmul through the MXU kernels) within
 * tolerance of Pallas's interpret mode; the line form's parser refuses malformed kernels with
 * the kernel line; a kernel still in bytecode is refused with what to run; an operation the
 * interpreter does not know is named. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/npy.h"
#include "chip/chip.h"
#include "chip/exec.h"
#include "chip/program.h"
#include "chip/timing.h"
#include "compile/compile.h"
#include "check.h"
#include "hlo/hlo.h"
#include "ir/verify.h"
#include "mosaic/mosaic.h"
#include "mosaic/mosaic_int.h"
#include "ref/ref.h"
#include "report/source.h"

static const char *const k_cases[] = {
    "matmul_bf16_64x256x128_b32x128x128", "matmul_bf16_f32out_32x128x256_b32x128x128",
    "matmul_f32_32x256x128_b32x128x128", "elementwise_exp_mul_f32_64x256", "softmax_rows_f32_32x256",
    "gather_rows_prefetch_f32", "manual_dma_sum_f32_64x128", "flash_attention_causal_f32_1x1x256x64_b128",
    "flash_attention_bwd_f32_1x1x256x64_b128", "splash_causal_f32_1x256x64_b128", "paged_attention_f32_b2_h1_p8x16_d128",
    /* megablox gmm: a dynamic grid (its bound a scalar operand); ragged paged attention */
    "megablox_gmm_f32_256x128x128_g4", "ragged_paged_attention_f32_t16_h2_p16x16_d128",
    /* user-style kernels (bench/pallas/user.py): roll, argmax/argmin, run_scoped, strided
     * reads, a nested emit_pipeline, DMAs out to an ANY result */
    "user_alias_roll_concat_f32_16x256", "user_cond_argmax_f32_16x128", "user_run_scoped_dma_f32_64x128",
    "user_strided_reshape_f32_32x256", "user_intdiv_roll_stride_argmin_32x128", "user_emit_pipeline_add_f32_64x256",
    "user_manual_dma_inout_f32_128x128",
    /* an output block revisited after another (accumulated over the leading grid dimension);
     * uint32 products and int8 wraparound (past 2^53 before they wrap) */
    "user_accum_leading_dim_f32_4x64x128", "user_int8_uint32_ops_32x128",
    /* static row slices of a vector in a fori_loop (extract_strided_slice's offsets an array
     * attribute: every slice read row 0 before) */
    "user_r2_fori_prefix_rows_f32_64x128",
    /* pl.reciprocal (tpu.reciprocal), jnp.take_along_axis (tpu.dynamic_gather): refused as not
     * modelled before; pl.Element windows (offsets in elements: read as block indices before,
     * past the array) */
    "user_r6_reciprocal_rownorm_f32_128x256", "user_r6_take_along_lanes_f32_8x128",
    "user_r6_element_offsets_rows_f32_4x8x128",
    /* jnp.isnan in a kernel: arith.cmpf one, the TPU's unordered not-equal (false on NaN before) */
    "user_r7_nan_inf_clean_f32_16x128",
    /* bench/pallas/bulk.py: math.tan and tpu.weird (jnp.isfinite on infinities and NaN), refused before */
    "bulk_ew_tan_f32_32x256_b8x128", "bulk_ew_isfin_f32_32x256_b8x128",
    /* pltpu.bitcast between widths (rows packed into 32-bit words and back: refused before);
     * casts to float8 in a kernel (kept in f32 before) */
    "bulk_bits_bitcast_bf16_i32", "bulk_bits_bitcast_i32_i8", "bulk_bits_cast_f32_f8e5", "bulk_bits_cast_bf16_f8e4",
    /* pl.debug_print of a vector (tpu.log_buffer) and of program ids (tpu.log): refused before */
    "bulk_misc_debug_print_vec", "bulk_misc_num_programs",
    /* pltpu.pack_elementwise / unpack_elementwise (bf16, int8, int16 and int4 fields; refused
     * before), against jax's docstring definitions in NumPy (no interpret-mode rule) */
    "pack_unpack_elementwise_8x128",
    /* int32 -> int4 -> int32 casts: i4 wrapped at 4 bits (held in s8 and wrapped at 8 before) */
    "int4_cast_wrap_i32_16x128", NULL};

static char g_src[1024];

static void path(char *buf, size_t n, const char *c, const char *file) {
  snprintf(buf, n, "%s/bench/pallas/corpus/%s/%s", g_src, c, file);
}

/* Runs one case on a backend (0: reference, 1: TPU values on v5e); compares with interp.npy. */
static void run_case(const char *c, int tpu, const tpu_chip *chip) {
  char p[1400];
  tpu_diag d;
  tpu_module *m = NULL;
  path(p, sizeof p, c, "prog.hlo");
  if (tpu_hlo_parse_file(p, &m, &d) != TPU_OK || tpu_ir_verify(m, &d) != TPU_OK) {
    char b[1200];
    tpu_diag_format(&d, b, sizeof b);
    fprintf(stderr, "%s: %s\n", c, b);
    CHECK(0);
    return;
  }
  const tpu_comp *e = m->entry;
  tpu_tensor args[8];
  int n = e->nparams;
  CHECK(n <= 8);
  for (int i = 0; i < n && i < 8; i++) {
    char f[32];
    snprintf(f, sizeof f, "in%d.npy", i);
    path(p, sizeof p, c, f);
    CHECK_EQ_INT(tpu_ref_load_input(p, i, &e->params[i]->shape, &args[i], &d), TPU_OK);
  }
  tpu_tensor out, want;
  tpu_status st = tpu ? tpu_chip_run_values(m, chip, -1, args, n, &out, &d) : tpu_ref_run(m, args, n, &out, &d);
  if (st != TPU_OK) {
    char b[1200];
    tpu_diag_format(&d, b, sizeof b);
    fprintf(stderr, "%s (%s): %s\n", c, tpu ? "tpu" : "ref", b);
  }
  CHECK_EQ_INT(st, TPU_OK);
  int nres = st == TPU_OK && out.dtype == TPU_TUPLE ? out.ntuple : 1;
  for (int r = 0; st == TPU_OK && r < nres; r++) {
    char f[32];
    if (nres == 1) snprintf(f, sizeof f, "interp.npy");
    else snprintf(f, sizeof f, "interp%d.npy", r);
    path(p, sizeof p, c, f);
    /* a kernel neither interpret mode runs on CPU (ragged paged attention): its jnp reference */
    FILE *fp = fopen(p, "rb");
    if (fp) fclose(fp);
    else {
      if (nres == 1) snprintf(f, sizeof f, "ref.npy");
      else snprintf(f, sizeof f, "ref%d.npy", r);
      path(p, sizeof p, c, f);
    }
    CHECK_EQ_INT(tpu_npy_read(p, &want, &d), TPU_OK);
    const tpu_tensor *o = out.dtype == TPU_TUPLE ? &out.elems[r] : &out;
    CHECK_EQ_INT((int)tpu_tensor_numel(o), (int)tpu_tensor_numel(&want));
    double amax = 0, worst = 0;
    for (int64_t i = 0; i < tpu_tensor_numel(&want); i++) {
      double w = tpu_tensor_get_f64(&want, i);
      if (isfinite(w)) amax = fmax(amax, fabs(w));
    }
    /* bf16 results: half an ulp of bf16 (the rounding of an f32 sum that may differ in its
     * last bits); f32: the sums' order (MXU K-tiles vs XLA CPU's) at 2^-20 of the largest value */
    double tol = o->dtype == TPU_BF16 ? 0 : 1.0 / (1 << 20);
    if (tpu_dtype_is_int(want.dtype)) tol = 0; /* integer results (packed words) exactly */
    /* The attention kernels chain more f32 reductions (online softmax, then the backward's
     * sums over blocks), each summed in its own order, and f32 products at 6 MXU passes on
     * the TPU backend: 2^-18 of the largest value (their worst: splash on the TPU backend,
     * 2^-18.6). */
    if (!strncmp(c, "flash_", 6) || !strncmp(c, "splash_", 7) || !strncmp(c, "paged_", 6) || !strncmp(c, "ragged_", 7))
      tol = 1.0 / (1 << 18);
    for (int64_t i = 0; i < tpu_tensor_numel(&want) && i < tpu_tensor_numel(o); i++) {
      double w = tpu_tensor_get_f64(&want, i), g = tpu_tensor_get_f64(o, i);
      if (!isfinite(w) || !isfinite(g)) { /* NaN where the reference has NaN, the same infinity */
        if (!(isnan(w) && isnan(g)) && w != g) worst = INFINITY;
        continue;
      }
      double lim = o->dtype == TPU_BF16 ? fabs(w) / 256.0 + 1e-6 : tol * amax + 1e-6;
      double err = fabs(g - w);
      if (err / (lim > 0 ? lim : 1) > worst) worst = err / (lim > 0 ? lim : 1);
    }
    if (worst > 1) fprintf(stderr, "%s (%s) result %d: worst error %.3g of the tolerance\n", c, tpu ? "tpu" : "ref", r, worst);
    CHECK(worst <= 1);
    tpu_tensor_free(&want);
  }
  if (st == TPU_OK) tpu_tensor_free(&out);
  for (int i = 0; i < n && i < 8; i++) tpu_tensor_free(&args[i]);
  tpu_module_free(m);
}

static tpu_status parse_text(const char *k, char *msg, size_t n) {
  tpu_mosaic *mo = NULL;
  tpu_diag d;
  tpu_status st = tpu_mosaic_parse(k, strlen(k), tpu_loc_at("t.hlo", 3, 5), &mo, &d);
  if (st != TPU_OK) tpu_diag_format(&d, msg, n);
  tpu_mosaic_free(mo);
  return st;
}

static void test_parse_errors(void) {
  char msg[600];
  CHECK_EQ_INT(parse_text("hello\n", msg, sizeof msg), TPU_ERR_PARSE);
  CHECK(strstr(msg, "t.hlo:3:5") && strstr(msg, "tpusim-mosaic 1"));
  /* an operation line with a wrong result count */
  const char *bad = "tpusim-mosaic 1\nop func.func 0 0 1 sym_name=s:k 1\n block 0\n  op arith.constant x\n end\n";
  CHECK_EQ_INT(parse_text(bad, msg, sizeof msg), TPU_ERR_PARSE);
  CHECK(strstr(msg, "Pallas kernel line 4") != NULL);
  /* an unknown type */
  bad = "tpusim-mosaic 1\nop func.func 0 0 1 sym_name=s:k 1\n block 1 0 q7\n end\n";
  CHECK_EQ_INT(parse_text(bad, msg, sizeof msg), TPU_ERR_PARSE);
  CHECK(strstr(msg, "unknown type 'q7'") != NULL);
  /* a block never closed */
  bad = "tpusim-mosaic 1\nop func.func 0 0 1 sym_name=s:k 1\n block 0\n";
  CHECK_EQ_INT(parse_text(bad, msg, sizeof msg), TPU_ERR_PARSE);
  CHECK(strstr(msg, "without 'end'") != NULL);
  /* a well-formed kernel: grid, windows */
  const char *ok =
      "tpusim-mosaic 1\n"
      "op func.func 0 0 5 iteration_bounds=a:4 scalar_prefetch=i:0 scratch_operands=i:0 sym_name=s:k "
      "window_params=[{transform_indices=@t;window_bounds=a:8,128};{transform_indices=@t;window_bounds=a:8,128}] 1\n"
      " block 3 0 i32 1 m:8x128:f32:vmem 2 m:8x128:f32:vmem\n"
      "  op func.return 0 0 0 0\n"
      " end\n"
      "op func.func 0 0 1 sym_name=s:t 1\n"
      " block 1 3 i32\n"
      "  op arith.constant 1 4 i32 0 1 value=i:0 0\n"
      "  op func.return 0 2 3 4 0 0\n"
      " end\n";
  tpu_mosaic *mo = NULL;
  tpu_diag d;
  CHECK_EQ_INT(tpu_mosaic_parse(ok, strlen(ok), tpu_noloc(), &mo, &d), TPU_OK);
  if (mo) {
    CHECK_EQ_STR(mo->name, "k");
    CHECK_EQ_INT(mo->ngrid, 1);
    CHECK_EQ_INT((int)mo->grid[0], 4);
    CHECK_EQ_INT(mo->nwindows, 2);
    CHECK(mo->win[1].has_map && mo->win[1].bounds[1] == 128);
    CHECK(!mo->win[0].element);
  }
  tpu_mosaic_free(mo);
  /* pl.Element windows: offsets in elements; with padding, refused (not modelled) */
  char el[1200];
  const char *w0 = strstr(ok, "{transform_indices=@t;window_bounds=a:8,128}");
  snprintf(el, sizeof el, "%.*s{transform_indices=@t;window_bounds=a:8,128;window_kind=#tpu.element_window<[0,0],[0,0]>}%s",
           (int)(w0 - ok), ok, w0 + strlen("{transform_indices=@t;window_bounds=a:8,128}"));
  mo = NULL;
  CHECK_EQ_INT(tpu_mosaic_parse(el, strlen(el), tpu_noloc(), &mo, &d), TPU_OK);
  if (mo) CHECK(mo->win[0].element && !mo->win[1].element && tpu_mo_window_start(&mo->win[0], 0, 17) == 17);
  tpu_mosaic_free(mo);
  char *pad = strstr(el, "<[0,0],[0,0]>");
  if (pad) pad[4] = '2';
  CHECK_EQ_INT(parse_text(el, msg, sizeof msg), TPU_ERR_PARSE);
  CHECK(strstr(msg, "element window (pl.Element) with padding") != NULL);
}

/* A custom call whose kernel is still bytecode, and one with an op the interpreter lacks. */
static void test_refusals(void) {
  const char *hlo =
      "HloModule m\n\nENTRY e {\n  x = f32[8,128]{1,0} parameter(0)\n"
      "  ROOT k = f32[8,128]{1,0} custom-call(x), custom_call_target=\"tpu_custom_call\", "
      "backend_config={\"custom_call_config\": {\"body\": \"TUzvUgFNTElS\"}}\n}\n";
  tpu_module *m = NULL;
  tpu_diag d;
  CHECK_EQ_INT(tpu_hlo_parse("t.hlo", hlo, strlen(hlo), &m, &d), TPU_OK);
  CHECK_EQ_INT(tpu_ir_verify(m, &d), TPU_OK);
  tpu_tensor x, out;
  int64_t dims[2] = {8, 128};
  CHECK_EQ_INT(tpu_tensor_alloc(&x, TPU_F32, 2, dims, &d), TPU_OK);
  CHECK_EQ_INT(tpu_ref_run(m, &x, 1, &out, &d), TPU_ERR_UNSUPPORTED);
  char msg[600];
  tpu_diag_format(&d, msg, sizeof msg);
  CHECK(strstr(msg, "t.hlo:5:") && strstr(msg, "pallas_decode.py") && strstr(msg, "pip install jax"));
  tpu_module_free(m);
  /* decoded, but with an operation not modelled */
  const char *hlo2 =
      "HloModule m\n\nENTRY e {\n  x = f32[8,128]{1,0} parameter(0)\n"
      "  ROOT k = f32[8,128]{1,0} custom-call(x), custom_call_target=\"tpu_custom_call\", "
      "backend_config={\"tpusim_mosaic\": \"tpusim-mosaic 1\\nop func.func 0 0 5 iteration_bounds=a:1 "
      "scalar_prefetch=i:0 scratch_operands=i:0 sym_name=s:kern window_params=[{};{}] 1\\n block 3 0 i32 1 m:8x128:f32:any "
      "2 m:8x128:f32:any\\n  op tpu.frobnicate 0 1 1 1 _loc=s:user.py:7 0\\n  op func.return 0 0 0 0\\n end\\n\"}\n}\n";
  CHECK_EQ_INT(tpu_hlo_parse("t.hlo", hlo2, strlen(hlo2), &m, &d), TPU_OK);
  CHECK_EQ_INT(tpu_ref_run(m, &x, 1, &out, &d), TPU_ERR_UNSUPPORTED);
  tpu_diag_format(&d, msg, sizeof msg);
  tpu_status st;
  if (!strstr(msg, "frobnicate")) fprintf(stderr, "%s\n", msg);
  CHECK(strstr(msg, "'tpu.frobnicate' is not modelled") && strstr(msg, "Pallas kernel 'kern'") && strstr(msg, "user.py:7"));
  tpu_module_free(m);
  /* an index map giving a block wholly outside its array (block 1 of an 8-row output in
   * blocks of 8 at step 1): a TPU's DMA bounds check halts the core; refused, naming the
   * output, the block and the grid step (a partial edge block stays allowed) */
  const char *hlo3 =
      "HloModule m\n\nENTRY e {\n  x = f32[8,128]{1,0} parameter(0)\n"
      "  ROOT k = f32[8,128]{1,0} custom-call(x), custom_call_target=\"tpu_custom_call\", "
      "backend_config={\"tpusim_mosaic\": \"tpusim-mosaic 1\\nop func.func 0 0 5 iteration_bounds=a:2 "
      "scalar_prefetch=i:0 scratch_operands=i:0 sym_name=s:k window_params=[{transform_indices=@z;window_bounds=a:8,128};"
      "{transform_indices=@t;window_bounds=a:8,128}] 1\\n block 3 0 i32 1 m:8x128:f32:vmem 2 m:8x128:f32:vmem\\n"
      "  op func.return 0 0 0 0\\n end\\nop func.func 0 0 1 sym_name=s:t 1\\n block 1 3 i32\\n"
      "  op arith.constant 1 4 i32 0 1 value=i:0 0\\n  op func.return 0 2 3 4 0 0\\n end\\n"
      "op func.func 0 0 1 sym_name=s:z 1\\n block 1 3 i32\\n  op arith.constant 1 4 i32 0 1 value=i:0 0\\n"
      "  op func.return 0 2 4 4 0 0\\n end\\n\"}\n}\n";
  CHECK_EQ_INT(tpu_hlo_parse("t.hlo", hlo3, strlen(hlo3), &m, &d), TPU_OK);
  st = tpu_ref_run(m, &x, 1, &out, &d);
  CHECK_EQ_INT(st, TPU_ERR_INVALID);
  tpu_diag_format(&d, msg, sizeof msg);
  if (!strstr(msg, "outside the array")) fprintf(stderr, "%s\n", msg);
  CHECK(strstr(msg, "t.hlo:5:") && strstr(msg, "output 0 gives block (1, 0) at grid step (1)") &&
        strstr(msg, "starts at element 8 of 8"));
  if (st == TPU_OK) tpu_tensor_free(&out);
  tpu_module_free(m);
  tpu_tensor_free(&x);
}

/* Parses the matmul fixture (grid (2,1,2), blocks x 32x128, y 128x128, o 32x128, bf16) and
 * compiles it for chip; a failure to compile is printed and checked. */
static tpu_status compile_matmul_fixture(const tpu_chip *chip, tpu_module **m, tpu_program **prog) {
  char p[1400];
  tpu_diag d;
  *m = NULL;
  *prog = NULL;
  path(p, sizeof p, "matmul_bf16_64x256x128_b32x128x128", "prog.hlo");
  CHECK_EQ_INT(tpu_hlo_parse_file(p, m, &d), TPU_OK);
  tpu_compile_opts o;
  memset(&o, 0, sizeof o);
  o.chip = chip;
  o.precision_override = -1;
  tpu_status st = *m ? tpu_compile(*m, &o, prog, &d) : TPU_ERR_INVALID;
  if (st != TPU_OK) {
    char b[1200];
    tpu_diag_format(&d, b, sizeof b);
    fprintf(stderr, "compile: %s\n", b);
  }
  CHECK_EQ_INT(st, TPU_OK);
  return st;
}

/* The TPU back end times the matmul fixture's grid as Pallas pipelines it: grid (2,1,2) with
 * blocks x 32x128, y 128x128, o 32x128 (bf16). Its transfers, closed form: x and y fetched at
 * each of the 4 steps (their block changes every step), o written back twice (each i); the
 * kernel's flops 2*64*256*128; the program repeats the (i) pattern as a loop; the step time
 * is at least each unit's busy time and the roofline's. */
static void test_timing(const tpu_chip *chip) {
  tpu_diag d;
  tpu_module *m = NULL;
  tpu_program *prog = NULL;
  tpu_status st = compile_matmul_fixture(chip, &m, &prog);
  if (st == TPU_OK) {
    int op = -1;
    for (int i = 0; i < prog->nops; i++)
      if (!strncmp(prog->ops[i].kind, "pallas:", 7)) op = i;
    CHECK(op >= 0);
    if (op >= 0) {
      const tpu_prog_op *po = &prog->ops[op];
      CHECK_EQ_STR(po->kind, "pallas:kernel");
      CHECK_EQ_INT((int)po->tiles, 4);
      CHECK_NEAR(po->flops, 2.0 * 64 * 256 * 128, 0.5);
      /* bf16 tiles of 16 rows: x 32x128 = 8 KiB, y 128x128 = 32 KiB, o 32x128 = 8 KiB */
      CHECK_NEAR(po->bytes, 4 * 8192.0 + 4 * 32768.0 + 2 * 8192.0, 0.5);
      /* the transfers in the program: the prologue's two, one pair inside the (k) loop body
       * and the last step's, write-backs after each i */
      int64_t in_b = 0, out_b = 0, mm = 0, loops = 0;
      for (int i = 0; i < prog->ninsns; i++) {
        const tpu_insn *x = &prog->insns[i];
        if (x->op != op) continue;
        in_b += x->opc == TPU_ISA_DMA_IN ? x->bytes : 0;
        out_b += x->opc == TPU_ISA_DMA_OUT ? x->bytes : 0;
        mm += x->opc == TPU_ISA_MATMUL && x->m == 32 && x->k == 128 && x->n == 128 && x->b == 1;
        loops += x->opc == TPU_ISA_LOOP;
      }
      CHECK(mm >= 1 && in_b > 0 && out_b == 8192 * (loops ? 1 : 2));
      tpu_timeline tl;
      memset(&tl, 0, sizeof tl);
      CHECK_EQ_INT(tpu_timing_run(prog, chip, 0, &tl, &d), TPU_OK);
      double bw = chip->hbm_bw / chip->clock_hz; /* bytes a cycle at the full bandwidth */
      double peak = 2.0 * (double)(chip->mxus_per_core * chip->mxu_rows * chip->mxu_cols);
      CHECK((double)tl.total_cycles >= po->bytes / bw);
      CHECK((double)tl.total_cycles >= po->flops / peak);
      tpu_timeline_free(&tl);
    }
  }
  tpu_program_free(prog);
  tpu_module_free(m);
}

/* A Pallas kernel's f32 matmul (6 bf16 passes) runs as one product whose passes are column
 * folds (one fill and drain: tpu_timing_pallas_matmul_cycles), not passes x the tile model:
 * the f32 corpus matmul's 2 grid steps keep the MXUs busy 2 x the folded cycles, fewer than
 * 2 x the unfolded ones. */
static void test_f32_passes_fold(const tpu_chip *chip) {
  char p[1400];
  tpu_diag d;
  tpu_module *m = NULL;
  path(p, sizeof p, "matmul_f32_32x256x128_b32x128x128", "prog.hlo");
  CHECK_EQ_INT(tpu_hlo_parse_file(p, &m, &d), TPU_OK);
  tpu_compile_opts o;
  memset(&o, 0, sizeof o);
  o.chip = chip;
  o.precision_override = -1;
  tpu_program *prog = NULL;
  CHECK_EQ_INT(m ? tpu_compile(m, &o, &prog, &d) : TPU_ERR_INVALID, TPU_OK);
  const tpu_insn *mm = NULL;
  for (int i = 0; prog && i < prog->ninsns; i++)
    if (prog->insns[i].opc == TPU_ISA_MATMUL && prog->insns[i].op >= 0 &&
        !strncmp(prog->ops[prog->insns[i].op].kind, "pallas:", 7))
      mm = &prog->insns[i];
  CHECK(mm != NULL);
  if (mm) {
    CHECK_EQ_INT(mm->passes, 6);
    int64_t folded = 0, plain = 0;
    CHECK_EQ_INT(tpu_timing_pallas_matmul_cycles(mm, chip, &folded, &d), TPU_OK);
    CHECK_EQ_INT(tpu_timing_matmul_cycles(mm, chip, &plain, &d), TPU_OK);
    CHECK(folded < plain);
    tpu_timeline tl;
    memset(&tl, 0, sizeof tl);
    CHECK_EQ_INT(tpu_timing_run(prog, chip, 0, &tl, &d), TPU_OK);
    CHECK_EQ_INT(tl.busy[TPU_UNIT_MXU], 2 * folded);
    tpu_timeline_free(&tl);
  }
  tpu_program_free(prog);
  tpu_module_free(m);
}

/* Compiles case c for the chip (seen: a values run's Pallas scalars, or NULL) and returns
 * its (first) Pallas kernel's grid steps and bytes moved. */
static void pallas_op(const char *c, const tpu_mosaic_seen_set *seen, const tpu_chip *chip, int64_t *tiles,
                      double *bytes) {
  char p[1400];
  tpu_diag d;
  tpu_module *m = NULL;
  *tiles = -1;
  *bytes = -1;
  path(p, sizeof p, c, "prog.hlo");
  CHECK_EQ_INT(tpu_hlo_parse_file(p, &m, &d), TPU_OK);
  tpu_compile_opts o;
  memset(&o, 0, sizeof o);
  o.chip = chip;
  o.precision_override = -1;
  o.mosaic_seen = seen;
  tpu_program *prog = NULL;
  CHECK_EQ_INT(m ? tpu_compile(m, &o, &prog, &d) : TPU_ERR_INVALID, TPU_OK);
  for (int i = 0; prog && i < prog->nops; i++)
    if (!strncmp(prog->ops[i].kind, "pallas:", 7) && *tiles < 0) {
      *tiles = prog->ops[i].tiles;
      *bytes = prog->ops[i].bytes;
    }
  tpu_program_free(prog);
  tpu_module_free(m);
}

/* The timing counts a Pallas call on the scalar operands its values run gave (recorded with
 * the loop trips): megablox gmm's dynamic grid (the number of active tiles, a leading s32[]
 * operand the program computes from group_sizes) is the bound the values computed, not the
 * guess from its tables' sizes; paged attention's page DMAs follow the real sequence lengths
 * (60 and 23 tokens), not zeros. */
static void test_timing_scalars(const tpu_chip *chip) {
  const char *cases[2] = {"megablox_gmm_f32_256x128x128_g4", "paged_attention_f32_b2_h1_p8x16_d128"};
  for (int c = 0; c < 2; c++) {
    char p[1400];
    tpu_diag d;
    tpu_module *m = NULL;
    path(p, sizeof p, cases[c], "prog.hlo");
    CHECK_EQ_INT(tpu_hlo_parse_file(p, &m, &d), TPU_OK);
    if (!m) continue;
    const tpu_comp *e = m->entry;
    tpu_tensor args[8], out;
    int n = e->nparams < 8 ? e->nparams : 8;
    for (int i = 0; i < n; i++) {
      char f[32];
      snprintf(f, sizeof f, "in%d.npy", i);
      path(p, sizeof p, cases[c], f);
      CHECK_EQ_INT(tpu_ref_load_input(p, i, &e->params[i]->shape, &args[i], &d), TPU_OK);
    }
    tpu_loop_trips trips;
    memset(&trips, 0, sizeof trips);
    CHECK_EQ_INT(tpu_chip_run_values_trips(m, chip, -1, args, n, &trips, &out, &d), TPU_OK);
    tpu_tensor_free(&out);
    CHECK_EQ_INT(trips.mosaic.n, 1);
    int64_t t0, t1;
    double b0, b1;
    pallas_op(cases[c], NULL, chip, &t0, &b0);
    pallas_op(cases[c], &trips.mosaic, chip, &t1, &b1);
    if (c == 0 && trips.mosaic.n == 1) { /* grid (active tiles, 1, 1): the bound is the first operand */
      int64_t bound = (int64_t)tpu_tensor_get_f64(&trips.mosaic.v[0].args[0], 0);
      if (t1 != bound) fprintf(stderr, "gmm: %lld steps timed, %lld active tiles\n", (long long)t1, (long long)bound);
      CHECK(bound > 0 && t1 == bound && t0 != bound);
    }
    if (c == 1) {
      if (!(b1 > b0)) fprintf(stderr, "paged attention: %g bytes on the real lengths, %g on zeros\n", b1, b0);
      CHECK(b1 > b0);
    }
    tpu_loop_trips_free(&trips);
    for (int i = 0; i < n; i++) tpu_tensor_free(&args[i]);
    tpu_module_free(m);
  }
}

/* A Pallas call's profile row names its kernel and the kernel's source line (the call has no
 * metadata here: its JAX op is "pallas_call"); another custom call gets neither. */
static void test_profile_source(void) {
  char p[1400];
  tpu_diag d;
  tpu_module *m = NULL;
  path(p, sizeof p, "flash_attention_causal_f32_1x1x256x64_b128", "prog.hlo");
  CHECK_EQ_INT(tpu_hlo_parse_file(p, &m, &d), TPU_OK);
  const tpu_instr *call = NULL;
  for (int c = 0; m && c < m->ncomps; c++) /* (the call sits in a computation the entry calls) */
    for (int i = 0; i < m->comps[c]->ninstrs; i++)
      if (tpu_mosaic_is_decoded(m->comps[c]->instrs[i])) call = m->comps[c]->instrs[i];
  CHECK(call != NULL);
  if (call) {
    tpu_op_source row;
    memset(&row, 0, sizeof row);
    CHECK(tpu_sources_fill(NULL, call, &row));
    CHECK(row.fused && !strncmp(row.fused, "_flash_attention_kernel @ flash_attention.py:", 45));
    CHECK(row.op_name && !strcmp(row.op_name, "pallas_call"));
    char buf[300];
    tpu_op_source_format(&row, buf, sizeof buf);
    CHECK(strstr(buf, "pallas_call [_flash_attention_kernel @ flash_attention.py:") == buf);
    tpu_op_source_free(&row);
    memset(&row, 0, sizeof row);
    CHECK(tpu_sources_fill(NULL, m->entry->params[0], &row));
    CHECK(!row.fused && !row.op_name);
    tpu_op_source_free(&row);
  }
  tpu_module_free(m);
}

/* Per-step work a count gives (on_step), collected. */
typedef struct {
  tpu_mosaic_work w[256];
  int n;
} steps_seen;

static void on_step_keep(void *user, int64_t step, const tpu_mosaic_work *w) {
  steps_seen *s = user;
  (void)step;
  if (s->n < 256) memcpy(&s->w[s->n], w, sizeof *w);
  s->n++;
}

/* Counting a grid runs a step's body (and an index map's result component) only for each
 * distinct value of the grid indices it reads, when no step can change what later steps see
 * (memo.c): every step's work, fetches and write-backs are the same as when every body and
 * map runs, on every corpus kernel (flash attention's maps run fewer times); a kernel whose body reads no grid
 * index (the elementwise one) runs one body; one with DMAs and semaphores (manual_dma_sum)
 * runs them all. */
static void test_count_memo(void) {
  int64_t saved = 0, fewer_ew = -1, all_dma = -1, maps_saved = 0, flash_maps = -1;
  for (int i = 0; k_cases[i]; i++) {
    char p[1400];
    tpu_diag d;
    tpu_module *m = NULL;
    path(p, sizeof p, k_cases[i], "prog.hlo");
    CHECK_EQ_INT(tpu_hlo_parse_file(p, &m, &d), TPU_OK);
    const tpu_instr *call = NULL;
    for (int c = 0; m && c < m->ncomps; c++)
      for (int j = 0; j < m->comps[c]->ninstrs && !call; j++)
        if (tpu_mosaic_is_decoded(m->comps[c]->instrs[j])) call = m->comps[c]->instrs[j];
    tpu_mosaic *k = NULL;
    if (!call || tpu_mosaic_of_instr(call, &k, &d) != TPU_OK) {
      CHECK(0);
      tpu_module_free(m);
      continue;
    }
    static steps_seen a, b;
    int64_t bodies[2] = {-1, -1}, maps[2] = {-1, -1};
    tpu_status st[2];
    for (int r = 0; r < 2; r++) {
      steps_seen *s = r ? &b : &a;
      s->n = 0;
      tpu_mosaic_opts o;
      memset(&o, 0, sizeof o);
      o.on_step = on_step_keep;
      o.user = s;
      o.no_memo = r;
      o.bodies = &bodies[r];
      o.maps = &maps[r];
      st[r] = tpu_mosaic_count(k, call, &o, &d);
    }
    CHECK_EQ_INT(st[0], st[1]);
    CHECK_EQ_INT(a.n, b.n);
    int same = a.n == b.n;
    for (int j = 0; same && j < a.n && j < 256; j++) same = !memcmp(&a.w[j], &b.w[j], sizeof a.w[j]);
    if (!same) fprintf(stderr, "%s: the memo changes the steps' work\n", k_cases[i]);
    CHECK(same);
    CHECK(bodies[0] <= bodies[1]);
    CHECK_EQ_INT((int)bodies[1], a.n - 1); /* every step (the last callback is the epilogue) */
    saved += bodies[1] - bodies[0];
    CHECK(maps[0] <= maps[1]);
    maps_saved += maps[1] - maps[0];
    if (!strcmp(k_cases[i], "flash_attention_causal_f32_1x1x256x64_b128")) flash_maps = maps[0] < maps[1];
    if (!strcmp(k_cases[i], "elementwise_exp_mul_f32_64x256")) fewer_ew = bodies[0];
    if (!strcmp(k_cases[i], "manual_dma_sum_f32_64x128")) all_dma = bodies[0] == bodies[1];
    tpu_mosaic_free(k);
    tpu_module_free(m);
  }
  CHECK(saved > 0);
  CHECK(maps_saved > 0);
  CHECK_EQ_INT((int)flash_maps, 1);
  CHECK_EQ_INT((int)fewer_ew, 1);
  CHECK_EQ_INT((int)all_dma, 1);
}

/* The interpreter's buffers: zeroed at every size, large ones mapped (pages cleared when
 * first touched) and still counted as allocations for fault injection. */
static void test_zeroed(void) {
  const int64_t sizes[3] = {7, 40000, 1 << 20};
  for (int i = 0; i < 3; i++) {
    double *p = tpu__mo_zeroed(sizes[i]);
    CHECK(p != NULL);
    if (!p) continue;
    int zero = 1;
    for (int64_t e = 0; e <= sizes[i]; e += 1 + sizes[i] / 1000) zero &= p[e] == 0;
    CHECK(zero && p[sizes[i]] == 0);
    p[sizes[i]] = 1.5;
    tpu__mo_release(p, sizes[i]);
    tpu_alloc_fail_after(1);
    CHECK(tpu__mo_zeroed(sizes[i]) == NULL);
    tpu_alloc_fail_after(0);
  }
}

/* A call counted without scalars is counted once a process per kernel, shapes and chip
 * (backend.c, the planner's candidates share their kernels): compiling the matmul fixture
 * again takes the kept plan, with the same op figures and cycles; another chip (v5p: two
 * TensorCores) counts afresh. */
static int64_t compile_fixture(const tpu_chip *chip, tpu_prog_op *po, char *kind, size_t nkind) {
  tpu_diag d;
  tpu_module *m = NULL;
  tpu_program *prog = NULL;
  int64_t cycles = -1;
  memset(po, 0, sizeof *po);
  if (compile_matmul_fixture(chip, &m, &prog) == TPU_OK) {
    for (int i = 0; i < prog->nops; i++)
      if (!strncmp(prog->ops[i].kind, "pallas:", 7)) *po = prog->ops[i];
    snprintf(kind, nkind, "%s", po->kind ? po->kind : "");
    po->kind = po->name = NULL; /* the program's strings, freed with it */
    po->instr = NULL;
    tpu_timeline tl;
    memset(&tl, 0, sizeof tl);
    if (tpu_timing_run(prog, chip, 0, &tl, &d) == TPU_OK) cycles = tl.total_cycles;
    tpu_timeline_free(&tl);
  }
  tpu_program_free(prog);
  tpu_module_free(m);
  return cycles;
}

static void test_count_kept(const tpu_chip *chip) {
  tpu_prog_op a, b, c;
  char ka[64] = "", kb[64] = "", kc[64] = "";
  int64_t h0 = tpu__mosaic_count_hits();
  int64_t c1 = compile_fixture(chip, &a, ka, sizeof ka);
  int64_t h1 = tpu__mosaic_count_hits();
  int64_t c2 = compile_fixture(chip, &b, kb, sizeof kb);
  int64_t h2 = tpu__mosaic_count_hits();
  printf("count kept: hits %lld -> %lld -> %lld, cycles %lld / %lld\n", (long long)h0, (long long)h1, (long long)h2,
         (long long)c1, (long long)c2);
  CHECK(c1 > 0);
  CHECK_EQ_INT(h2, h1 + 1);
  CHECK(c1 == c2);
  CHECK(a.tiles == b.tiles && a.flops == b.flops && a.bytes == b.bytes && a.padded_flops == b.padded_flops);
  CHECK(ka[0] && !strcmp(ka, kb));
  tpu_chip v5p;
  tpu_diag d;
  CHECK_EQ_INT(tpu_chip_load("v5p", &v5p, &d), TPU_OK);
  CHECK(v5p.tensorcores != chip->tensorcores);
  CHECK(compile_fixture(&v5p, &c, kc, sizeof kc) > 0);
  CHECK_EQ_INT(tpu__mosaic_count_hits(), h2);
}

int main(void) {
  const char *s = getenv("TPU_SRC");
  snprintf(g_src, sizeof g_src, "%s", s ? s : ".");
  tpu_chip chip;
  tpu_diag d;
  CHECK_EQ_INT(tpu_chip_load("v5e", &chip, &d), TPU_OK);
  for (int i = 0; k_cases[i]; i++) {
    run_case(k_cases[i], 0, &chip);
    run_case(k_cases[i], 1, &chip);
  }
  test_timing(&chip);
  test_count_kept(&chip);
  test_f32_passes_fold(&chip);
  test_timing_scalars(&chip);
  test_count_memo();
  test_zeroed();
  test_profile_source();
  test_parse_errors();
  test_refusals();
  CHECK_DONE();
}
