/* Reference kernel for rng-bit-generator: XLA's ThreeFry-2x32 (20 rounds) and
 * Philox-4x32 (10 rounds) bit generators, with XLA's key/counter split, output order and
 * state update (xla/service/rng_bit_generator_expander.cc, xla/hlo/builder/lib/prng.cc). */
#include <string.h>

#include "ref/ref_int.h"

/* ---- The two block ciphers ---- */

static uint32_t rotl32(uint32_t v, int r) { return (v << r) | (v >> (32 - r)); }

/* Threefry-2x32 with 20 rounds (Salmon et al., SC 2011): encrypts the counter words
 * x[0..1] under key k[0..1] in place. */
static void threefry2x32(const uint32_t k[2], uint32_t x[2]) {
  static const int rot[8] = {13, 15, 26, 6, 17, 29, 16, 24};
  uint32_t ks[3] = {k[0], k[1], 0x1BD11BDAu ^ k[0] ^ k[1]};
  x[0] += ks[0];
  x[1] += ks[1];
  for (int g = 0; g < 5; g++) { /* five groups of four rounds, each followed by a key injection */
    const int *r = rot + (g % 2) * 4;
    for (int i = 0; i < 4; i++) {
      x[0] += x[1];
      x[1] = rotl32(x[1], r[i]);
      x[1] ^= x[0];
    }
    x[0] += ks[(g + 1) % 3];
    x[1] += ks[(g + 2) % 3] + (uint32_t)(g + 1);
  }
}

/* Philox-4x32 with 10 rounds: encrypts the counter words x[0..3] under key k[0..1]. */
static void philox4x32(const uint32_t key[2], uint32_t x[4]) {
  uint32_t k0 = key[0], k1 = key[1];
  for (int r = 0; r < 10; r++) {
    uint64_t p0 = (uint64_t)x[0] * 0xD2511F53u;
    uint64_t p1 = (uint64_t)x[2] * 0xCD9E8D57u;
    uint32_t y0 = (uint32_t)(p1 >> 32) ^ x[1] ^ k0;
    uint32_t y1 = (uint32_t)p1;
    uint32_t y2 = (uint32_t)(p0 >> 32) ^ x[3] ^ k1;
    uint32_t y3 = (uint32_t)p0;
    x[0] = y0, x[1] = y1, x[2] = y2, x[3] = y3;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
}

/* Stores the low `es` bytes of v (es = 1, 2, 4 or 8) as element i of buf; narrow types
 * keep the low bits, as XLA's convert from u32 does. */
static void put_bits(void *buf, size_t es, int64_t i, uint64_t v) {
  char *p = (char *)buf + (size_t)i * es;
  switch (es) {
    case 1: {
      uint8_t b = (uint8_t)v;
      memcpy(p, &b, 1);
      break;
    }
    case 2: {
      uint16_t b = (uint16_t)v;
      memcpy(p, &b, 2);
      break;
    }
    case 4: {
      uint32_t b = (uint32_t)v;
      memcpy(p, &b, 4);
      break;
    }
    default: memcpy(p, &v, 8); break;
  }
}

/* ---- ThreeFry ---- */

/* 32-bit (and narrower) outputs. XLA halves the shape along one dim: the first even dim,
 * else the largest (the first of equal largest). Counter ctr + L encrypts to the pair
 * that lands at positions 2h and 2h+1 along that dim, where L is the row-major index of
 * the element in the halved shape and h its coordinate along the split dim. A scalar is
 * the first word of counter ctr. Returns how far the counter advanced (elements of the
 * halved shape). */
static uint64_t threefry_32(const uint32_t key[2], uint64_t ctr, const tpu_tensor *t) {
  size_t es = tpu_dtype_size(t->dtype);
  if (t->rank == 0) {
    uint32_t x[2] = {(uint32_t)ctr, (uint32_t)(ctr >> 32)};
    threefry2x32(key, x);
    put_bits(t->data, es, 0, x[0]);
    return 1;
  }
  int s = -1;
  for (int i = 0; i < t->rank && s < 0; i++)
    if (t->dims[i] % 2 == 0) s = i;
  if (s < 0) {
    s = 0;
    for (int i = 1; i < t->rank; i++)
      if (t->dims[i] > t->dims[s]) s = i;
  }
  int64_t outer = 1, inner = 1, n = t->dims[s], half = (t->dims[s] + 1) / 2;
  for (int i = 0; i < s; i++) outer *= t->dims[i];
  for (int i = s + 1; i < t->rank; i++) inner *= t->dims[i];
  uint64_t L = 0;
  for (int64_t o = 0; o < outer; o++)
    for (int64_t h = 0; h < half; h++)
      for (int64_t k = 0; k < inner; k++, L++) {
        uint64_t c = ctr + L;
        uint32_t x[2] = {(uint32_t)c, (uint32_t)(c >> 32)};
        threefry2x32(key, x);
        int64_t base = (o * n + 2 * h) * inner + k;
        put_bits(t->data, es, base, x[0]);
        if (2 * h + 1 < n) put_bits(t->data, es, base + inner, x[1]);
      }
  return (uint64_t)(outer * half * inner);
}

/* 64-bit outputs: element i is the pair from counter ctr + i, first word low. */
static uint64_t threefry_64(const uint32_t key[2], uint64_t ctr, const tpu_tensor *t) {
  int64_t n = tpu_tensor_numel(t);
  for (int64_t i = 0; i < n; i++) {
    uint64_t c = ctr + (uint64_t)i;
    uint32_t x[2] = {(uint32_t)c, (uint32_t)(c >> 32)};
    threefry2x32(key, x);
    put_bits(t->data, 8, i, (uint64_t)x[0] | ((uint64_t)x[1] << 32));
  }
  return (uint64_t)n;
}

/* ---- Philox ---- */

/* A 128-bit counter as two u64 words. */
typedef struct {
  uint64_t lo, hi;
} u128;

/* c + j with the carry into the high word (XLA's Uint128AddUint64). */
static u128 u128_add(u128 c, uint64_t j) {
  u128 r = {c.lo + j, c.hi};
  if (r.lo < c.lo) r.hi++;
  return r;
}

static void philox_block(const uint32_t key[2], u128 c, uint32_t x[4]) {
  x[0] = (uint32_t)c.lo;
  x[1] = (uint32_t)(c.lo >> 32);
  x[2] = (uint32_t)c.hi;
  x[3] = (uint32_t)(c.hi >> 32);
  philox4x32(key, x);
}

/* 32-bit (and narrower) outputs: block j (counter ctr + j) gives elements 4j..4j+3.
 * Returns the number of blocks used. */
static uint64_t philox_32(const uint32_t key[2], u128 ctr, const tpu_tensor *t) {
  size_t es = tpu_dtype_size(t->dtype);
  int64_t n = tpu_tensor_numel(t), blocks = (n + 3) / 4;
  for (int64_t j = 0; j < blocks; j++) {
    uint32_t x[4];
    philox_block(key, u128_add(ctr, (uint64_t)j), x);
    for (int i = 0; i < 4 && 4 * j + i < n; i++) put_bits(t->data, es, 4 * j + i, x[i]);
  }
  return (uint64_t)blocks;
}

/* 64-bit outputs: block j gives elements 2j (words 0,1) and 2j+1 (words 2,3), low word
 * first. */
static uint64_t philox_64(const uint32_t key[2], u128 ctr, const tpu_tensor *t) {
  int64_t n = tpu_tensor_numel(t), blocks = (n + 1) / 2;
  for (int64_t j = 0; j < blocks; j++) {
    uint32_t x[4];
    philox_block(key, u128_add(ctr, (uint64_t)j), x);
    put_bits(t->data, 8, 2 * j, (uint64_t)x[0] | ((uint64_t)x[1] << 32));
    if (2 * j + 1 < n) put_bits(t->data, 8, 2 * j + 1, (uint64_t)x[2] | ((uint64_t)x[3] << 32));
  }
  return (uint64_t)blocks;
}

tpu_status tpu__ref_rng(tpu_interp *ip, const tpu_instr *in, const tpu_tensor *const *args, tpu_tensor *out,
                        tpu_diag *d) {
  (void)ip;
  tpu_tensor_zero(out);
  const tpu_tensor *state = args[0];
  if (in->op != TPU_OP_RNG_BIT_GENERATOR)
    return TPU_FAIL(d, TPU_ERR_UNSUPPORTED, in->loc, "op '%s' is not rng-bit-generator", tpu_op_name(in->op));
  /* XLA on CPU and GPU expands rng_default to Philox; we follow the CPU backend, which
   * is what the values are checked against. */
  tpu_rng_alg alg = in->rng_algorithm == TPU_RNG_DEFAULT ? TPU_RNG_PHILOX : in->rng_algorithm;
  int64_t ns = state->rank == 1 ? state->dims[0] : -1;
  int ok_state = state->dtype == TPU_U64 && (alg == TPU_RNG_THREEFRY ? ns == 2 : (ns == 2 || ns == 3));
  if (!ok_state)
    return TPU_FAIL(d, TPU_ERR_UNSUPPORTED, in->loc, "rng-bit-generator: %s needs a u64[%s] state",
                    alg == TPU_RNG_THREEFRY ? "three_fry" : "philox", alg == TPU_RNG_THREEFRY ? "2" : "2] or u64[3");
  if (in->shape.dtype != TPU_TUPLE || in->shape.ntuple != 2)
    return TPU_FAIL(d, TPU_ERR_INVALID, in->loc, "rng-bit-generator must produce a (state, bits) tuple");
  const tpu_shape *bs = &in->shape.elems[1];
  size_t es = tpu_dtype_size(bs->dtype);
  if (bs->dtype == TPU_PRED || !tpu_dtype_is_array(bs->dtype) || (es != 1 && es != 2 && es != 4 && es != 8))
    return TPU_FAIL(d, TPU_ERR_UNSUPPORTED, in->loc, "rng-bit-generator cannot produce %s bits", tpu_dtype_name(bs->dtype));

  tpu_diag inner;
  tpu_status st = tpu__ref_alloc_shape(out, &in->shape, &inner);
  if (st != TPU_OK) return TPU_FAIL(d, st, in->loc, "%s", inner.msg);
  uint64_t sv[3] = {0, 0, 0};
  memcpy(sv, state->data, (size_t)ns * 8);
  uint32_t key[2] = {(uint32_t)sv[0], (uint32_t)(sv[0] >> 32)};
  tpu_tensor *bits = &out->elems[1];

  if (alg == TPU_RNG_THREEFRY) {
    /* Key = state[0], counter = state[1]; the new state is [key, counter + used]. */
    uint64_t used = es == 8 ? threefry_64(key, sv[1], bits) : threefry_32(key, sv[1], bits);
    sv[1] += used;
  } else {
    /* Key = state[0]. The 128-bit counter is (low = state[1], high = state[2]) for a
     * u64[3] state; for u64[2] XLA reverses the state, so the high word is state[0] (the
     * key), and only the low word is written back. */
    u128 ctr = {sv[1], ns == 3 ? sv[2] : sv[0]};
    uint64_t used = es == 8 ? philox_64(key, ctr, bits) : philox_32(key, ctr, bits);
    u128 next = u128_add(ctr, used);
    sv[1] = next.lo;
    if (ns == 3) sv[2] = next.hi;
  }
  memcpy(out->elems[0].data, sv, (size_t)ns * 8);
  return TPU_OK;
}
