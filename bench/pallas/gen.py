#!/usr/bin/env python3
"""gen.py: the Pallas kernel corpus — Pallas TPU kernels lowered for a TPU (no TPU needed),
decoded for tpusim, with their inputs, Pallas's interpret-mode outputs (values on CPU) and a
plain jnp reference, as fixtures the C suite runs (tests/unit/mosaic/test_mosaic_corpus.c).

    pip install jax numpy                    # jax 0.10.2 here
    python3 bench/pallas/gen.py [NAME_SUBSTRING...]

Writes bench/pallas/corpus/NAME/: prog.hlo (jax.jit(f).lower(...) for a v5e device, each
tpu_custom_call's kernel decoded by python/tpusim/pallas_decode.py), in0.npy..., interp.npy
(pallas_call(..., interpret=True) on CPU: the values Pallas itself defines; the library
kernels of pallas.ops.tpu, which have no interpret switch, run with every pallas_call forced
into the TPU interpret mode, pltpu.InterpretParams) and ref.npy (the same computation in jnp);
interpN.npy / refN.npy for a program of several results. Each case seeds NumPy from the CRC-32 of its name. Cases are split
tune/test by the first byte of sha1(name): even = tune, odd = test (docs/pallas.md)."""
import hashlib
import os
import sys
import zlib

os.environ.setdefault("TPU_ACCELERATOR_TYPE", "v5litepod-4")
os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")
if "xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):  # CPU pods (all_gather)
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8").strip()
import numpy as np
import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "..", "python", "tpusim"))
import pallas_decode  # noqa: E402

OUT = os.path.join(HERE, "corpus")
_dev = None


def tpu_device():
    global _dev
    if _dev is None:
        from jax.experimental import topologies
        _dev = topologies.get_topology_desc(platform="tpu", topology_name="v5e:2x2").devices[0]
    return _dev


def split(name):
    return "test" if hashlib.sha1(name.encode()).digest()[0] % 2 else "tune"


# ---- kernels (each builder returns f(*args, interpret=False)) ----

def matmul(bm, bk, bn, out_dtype=None):
    def kernel(x_ref, y_ref, o_ref, acc_ref):
        @pl.when(pl.program_id(2) == 0)
        def _():
            acc_ref[...] = jnp.zeros_like(acc_ref)
        acc_ref[...] += jnp.dot(x_ref[...], y_ref[...], preferred_element_type=jnp.float32)

        @pl.when(pl.program_id(2) == pl.num_programs(2) - 1)
        def _():
            o_ref[...] = acc_ref[...].astype(o_ref.dtype)

    def f(x, y, interpret=False):
        m, k = x.shape
        n = y.shape[1]
        return pl.pallas_call(
            kernel, out_shape=jax.ShapeDtypeStruct((m, n), out_dtype or x.dtype),
            grid_spec=pltpu.PrefetchScalarGridSpec(
                num_scalar_prefetch=0, grid=(m // bm, n // bn, k // bk),
                in_specs=[pl.BlockSpec((bm, bk), lambda i, j, kk: (i, kk)),
                          pl.BlockSpec((bk, bn), lambda i, j, kk: (kk, j))],
                out_specs=pl.BlockSpec((bm, bn), lambda i, j, kk: (i, j)),
                scratch_shapes=[pltpu.VMEM((bm, bn), jnp.float32)]),
            compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "parallel", "arbitrary")),
            interpret=interpret)(x, y)
    return f


def elementwise(block):
    def kernel(x_ref, y_ref, o_ref):
        o_ref[...] = jnp.exp(x_ref[...]) * y_ref[...] + 1.0

    def f(x, y, interpret=False):
        return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), grid=(x.shape[0] // block[0],),
                              in_specs=[pl.BlockSpec(block, lambda i: (i, 0))] * 2,
                              out_specs=pl.BlockSpec(block, lambda i: (i, 0)), interpret=interpret)(x, y)
    return f


def softmax_rows(block_rows):
    def kernel(x_ref, o_ref):
        x = x_ref[...]
        m = jnp.max(x, axis=-1, keepdims=True)
        e = jnp.exp(x - m)
        o_ref[...] = e / jnp.sum(e, axis=-1, keepdims=True)

    def f(x, interpret=False):
        return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), grid=(x.shape[0] // block_rows,),
                              in_specs=[pl.BlockSpec((block_rows, x.shape[1]), lambda i: (i, 0))],
                              out_specs=pl.BlockSpec((block_rows, x.shape[1]), lambda i: (i, 0)),
                              interpret=interpret)(x)
    return f


def gather_rows(block_rows):
    """Scalar prefetch: the row blocks to copy come from an index array in SMEM."""
    def kernel(idx_ref, x_ref, o_ref):
        o_ref[...] = x_ref[...] * 2.0

    def f(idx, x, interpret=False):
        nb = idx.shape[0]
        return pl.pallas_call(
            kernel, out_shape=jax.ShapeDtypeStruct((nb * block_rows, x.shape[1]), x.dtype),
            grid_spec=pltpu.PrefetchScalarGridSpec(
                num_scalar_prefetch=1, grid=(nb,),
                in_specs=[pl.BlockSpec((block_rows, x.shape[1]), lambda i, idx: (idx[i], 0))],
                out_specs=pl.BlockSpec((block_rows, x.shape[1]), lambda i, idx: (i, 0))),
            interpret=interpret)(idx, x)
    return f


def manual_dma(chunk):
    """memory_space=ANY and a double-buffered make_async_copy loop with semaphores."""
    def kernel(x_hbm, o_ref, buf, sem):
        n = x_hbm.shape[0] // chunk

        def copy(i, slot):
            return pltpu.make_async_copy(x_hbm.at[pl.ds(i * chunk, chunk)], buf.at[slot], sem.at[slot])
        copy(0, 0).start()

        def body(i, acc):
            slot = i % 2

            @pl.when(i + 1 < n)
            def _():
                copy(i + 1, 1 - slot).start()
            copy(i, slot).wait()
            return acc + buf[slot]
        o_ref[...] = jax.lax.fori_loop(0, n, body, jnp.zeros((chunk, x_hbm.shape[1]), jnp.float32))

    def f(x, interpret=False):
        return pl.pallas_call(
            kernel, out_shape=jax.ShapeDtypeStruct((chunk, x.shape[1]), jnp.float32),
            in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
            out_specs=pl.BlockSpec(memory_space=pltpu.VMEM),
            scratch_shapes=[pltpu.VMEM((2, chunk, x.shape[1]), jnp.float32), pltpu.SemaphoreType.DMA((2,))],
            interpret=interpret)(x)
    return f


class interpreting:
    """The library kernels (pallas.ops.tpu) have no interpret switch: within this context every
    pallas_call runs in Pallas's TPU interpret mode (pltpu.InterpretParams: DMAs, semaphores
    and SMEM as a TPU has them), on CPU."""

    def __init__(self, mode=None):
        self.mode = mode

    def __enter__(self):
        jax.clear_caches()  # the library's inner jits would reuse their TPU traces
        self.orig = pl.pallas_call

        def forced(*a, **k):
            k["interpret"] = self.mode if self.mode is not None else pltpu.InterpretParams()
            return self.orig(*a, **k)
        pl.pallas_call = forced

    def __exit__(self, *exc):
        pl.pallas_call = self.orig
        jax.clear_caches()


def library(call, mode=None):
    """f(*args, interpret) for a library kernel `call(*args)` (mode: the interpret mode, default
    the TPU interpret mode; True: Pallas's plain HLO interpreter)."""
    def f(*args, interpret=False):
        if interpret:
            with interpreting(mode):
                return call(*args)
        return call(*args)
    return f


def flash_attention_causal(block):
    """jax.experimental.pallas.ops.tpu.flash_attention (forward, causal)."""
    from jax.experimental.pallas.ops.tpu import flash_attention as fa
    bs = fa.BlockSizes(block_q=block, block_k_major=block, block_k=block, block_b=1)
    return library(lambda q, k, v: fa.flash_attention(q, k, v, causal=True, block_sizes=bs))


def flash_attention_bwd(block):
    """flash_attention's backward kernels (dq; dk and dv) through jax.grad."""
    from jax.experimental.pallas.ops.tpu import flash_attention as fa
    bs = fa.BlockSizes(block_q=block, block_k_major=block, block_k=block, block_b=1, block_q_major_dkv=block,
                       block_k_major_dkv=block, block_k_dkv=block, block_q_dkv=block, block_k_major_dq=block,
                       block_k_dq=block, block_q_dq=block)
    return library(lambda q, k, v: jax.grad(
        lambda q, k, v: fa.flash_attention(q, k, v, causal=True, block_sizes=bs).sum(), argnums=(0, 1, 2))(q, k, v))


def splash_causal(heads, seq, block):
    """splash_attention (multi-head, causal mask)."""
    from jax.experimental.pallas.ops.tpu.splash_attention import splash_attention_kernel as sk
    from jax.experimental.pallas.ops.tpu.splash_attention import splash_attention_mask as sm
    mask = sm.MultiHeadMask([sm.CausalMask((seq, seq)) for _ in range(heads)])
    k = sk.make_splash_mha(mask, head_shards=1, q_seq_shards=1,
                           block_sizes=sk.BlockSizes(block_q=block, block_kv=block, block_kv_compute=block))
    return library(lambda q, kk, v: k(q, kk, v))


def paged(pages_per_block):
    """paged_attention (decode: scalar-prefetched lengths and page tables, manual page DMAs)."""
    from jax.experimental.pallas.ops.tpu.paged_attention import paged_attention as pa
    return library(lambda q, k, v, lens, pages: pa(q, k, v, lens, pages, pages_per_compute_block=pages_per_block))


def megablox(tiling):
    """megablox.gmm: a grouped matmul whose grid's row dimension (the active tiles) is a run-time
    bound computed from group_sizes (a dynamic grid), with scalar-prefetched group metadata."""
    from jax.experimental.pallas.ops.tpu.megablox import gmm
    return library(lambda lhs, rhs, gs: gmm(lhs, rhs, gs, tiling=tiling))


def gmm_reference(lhs, rhs, gs):
    out, start = [], 0
    for g, n in enumerate(np.asarray(gs)):
        out.append(jnp.dot(lhs[start:start + int(n)], rhs[g], precision="highest"))
        start += int(n)
    return jnp.concatenate(out)


def ragged_paged(pages_per_block, queries_per_block):
    """ragged_paged_attention (mixed prefill and decode over a paged KV cache). Checked against
    the library's own jnp reference (ref_ragged_paged_attention) only: in jax 0.10.2 neither
    interpret mode runs it on CPU (the TPU one: 'ReshapeTransform' object has no attribute
    'indices'; the plain one: 'TypedInt' object has no attribute 'shape')."""
    from jax.experimental.pallas.ops.tpu.ragged_paged_attention import ragged_paged_attention as rpa
    return library(lambda q, kv, lens, pages, cu, n: rpa(q, kv, lens, pages, cu, n, num_kv_pages_per_block=pages_per_block,
                                                          num_queries_per_block=queries_per_block))


def pack_unpack():
    """pltpu.pack_elementwise / unpack_elementwise (no interpret-mode rule in jax 0.10.2): f32
    pairs packed as bf16, int32 packed as int8, int16 and int4 fields into uint32 words, and one
    field of each unpacked; checked against pack_reference, jax's docstring definitions in
    NumPy."""
    def kernel(a_ref, b_ref, c_ref, *o):
        a, b, c = a_ref[...], b_ref[...], c_ref[...]
        outs = []
        for xs, pt, idx in (([a, b], jnp.bfloat16, 1), ([c, c >> 8, c >> 16, -c], jnp.int8, 3),
                            ([c, c ^ 0x5A5A], jnp.int16, 0), ([c >> (4 * i) for i in range(8)], jnp.int4, 5)):
            p = pltpu.pack_elementwise(xs, packed_dtype=pt)
            outs += [p, pltpu.unpack_elementwise(p, index=idx, packed_dtype=pt, unpacked_dtype=xs[0].dtype)]
        for r, v in zip(o, outs):
            r[...] = v

    def f(a, b, c, interpret=False):
        u32, i32 = jax.ShapeDtypeStruct(a.shape, jnp.uint32), jax.ShapeDtypeStruct(a.shape, jnp.int32)
        return pl.pallas_call(kernel, out_shape=[u32, jax.ShapeDtypeStruct(a.shape, jnp.float32)] + [u32, i32] * 3,
                              interpret=interpret)(a, b, c)
    return f


def int4_casts():
    """int32 cast to int4 and back (arith.trunci to i4: the low 4 bits, sign-extended), and an
    int4 through f32 (sitofp from i4). libtpu compiles these casts (it refuses i4 arithmetic:
    "Only vector<i16> and vector<i32> are supported")."""
    def kernel(a_ref, b_ref, o_ref, p_ref):
        o_ref[...] = a_ref[...].astype(jnp.int4).astype(jnp.int32)
        p_ref[...] = b_ref[...].astype(jnp.int4).astype(jnp.float32).astype(jnp.int32)

    def f(a, b, interpret=False):
        return pl.pallas_call(kernel, out_shape=[jax.ShapeDtypeStruct(a.shape, jnp.int32)] * 2, interpret=interpret)(a, b)
    return f


def pack_reference(a, b, c):
    """pack_elementwise: each source's packed_dtype bits (f32 -> bf16 rounded to nearest even;
    integers truncated) interleaved from the lowest bits up in source order, as uint32;
    unpack_elementwise(index=i): field i sign-extended (bf16 widened) to the unpacked type."""
    import ml_dtypes
    a, b, c = (np.asarray(x) for x in (a, b, c))
    out = []
    for xs, bits, idx, flt in (([a, b], 16, 1, True), ([c, c >> 8, c >> 16, -c], 8, 3, False),
                               ([c, c ^ 0x5A5A], 16, 0, False), ([c >> (4 * i) for i in range(8)], 4, 5, False)):
        mask = (1 << bits) - 1
        fields = [x.astype(ml_dtypes.bfloat16).view(np.uint16).astype(np.uint64) if flt else
                  x.astype(np.int64).astype(np.uint64) & np.uint64(mask) for x in xs]
        word = np.zeros(a.shape, np.uint64)
        for i, fl in enumerate(fields):
            word |= fl << np.uint64(i * bits)
        field = (word >> np.uint64(idx * bits)) & np.uint64(mask)
        if flt:
            un = field.astype(np.uint16).view(ml_dtypes.bfloat16).astype(np.float32)
        else:
            sf = field.astype(np.int64)
            un = np.where(sf >> (bits - 1), sf - (1 << bits), sf).astype(np.int32)
        out += [word.astype(np.uint32), un]
    return out


def rng(name):
    return np.random.default_rng(zlib.crc32(name.encode()))


def bf16(a):
    return jnp.asarray(a, jnp.bfloat16)


CASES = []


def case(name, fn, make_args, reference):
    CASES.append((name, fn, make_args, reference))


case("matmul_bf16_64x256x128_b32x128x128", matmul(32, 128, 128),
     lambda r: [bf16(r.standard_normal((64, 256))), bf16(r.standard_normal((256, 128)))],
     lambda x, y: jnp.dot(x, y, preferred_element_type=jnp.float32).astype(x.dtype))
case("matmul_bf16_f32out_32x128x256_b32x128x128", matmul(32, 128, 128, jnp.float32),
     lambda r: [bf16(r.standard_normal((32, 128))), bf16(r.standard_normal((128, 256)))],
     lambda x, y: jnp.dot(x, y, preferred_element_type=jnp.float32))
case("matmul_f32_32x256x128_b32x128x128", matmul(32, 128, 128),
     lambda r: [jnp.asarray(r.standard_normal((32, 256)), jnp.float32), jnp.asarray(r.standard_normal((256, 128)), jnp.float32)],
     lambda x, y: jnp.dot(x, y, precision="highest"))
case("elementwise_exp_mul_f32_64x256", elementwise((16, 256)),
     lambda r: [jnp.asarray(r.standard_normal((64, 256)), jnp.float32), jnp.asarray(r.standard_normal((64, 256)), jnp.float32)],
     lambda x, y: jnp.exp(x) * y + 1.0)
case("softmax_rows_f32_32x256", softmax_rows(8),
     lambda r: [jnp.asarray(r.standard_normal((32, 256)) * 3, jnp.float32)],
     lambda x: jax.nn.softmax(x, axis=-1))
case("gather_rows_prefetch_f32", gather_rows(8),
     lambda r: [jnp.asarray([3, 0, 2, 2], jnp.int32), jnp.asarray(r.standard_normal((32, 128)), jnp.float32)],
     lambda idx, x: jnp.concatenate([x[8 * int(i):8 * int(i) + 8] for i in idx]) * 2.0)
case("manual_dma_sum_f32_64x128", manual_dma(8),
     lambda r: [jnp.asarray(r.standard_normal((64, 128)), jnp.float32)],
     lambda x: x.reshape(8, 8, 128).sum(0))
case("flash_attention_causal_f32_1x1x256x64_b128", flash_attention_causal(128),
     lambda r: [jnp.asarray(r.standard_normal((1, 1, 256, 64)), jnp.float32) for _ in range(3)],
     lambda q, k, v: jax.nn.dot_product_attention(q.transpose(0, 2, 1, 3), k.transpose(0, 2, 1, 3), v.transpose(0, 2, 1, 3),
                                                  is_causal=True, scale=1.0).transpose(0, 2, 1, 3))


case("flash_attention_bwd_f32_1x1x256x64_b128", flash_attention_bwd(128),
     lambda r: [jnp.asarray(r.standard_normal((1, 1, 256, 64)), jnp.float32) for _ in range(3)],
     lambda q, k, v: jax.grad(lambda q, k, v: jax.nn.dot_product_attention(
         q.transpose(0, 2, 1, 3), k.transpose(0, 2, 1, 3), v.transpose(0, 2, 1, 3), is_causal=True,
         scale=1.0).transpose(0, 2, 1, 3).sum(), argnums=(0, 1, 2))(q, k, v))
case("splash_causal_f32_1x256x64_b128", splash_causal(1, 256, 128),
     lambda r: [jnp.asarray(r.standard_normal((1, 256, 64)), jnp.float32) for _ in range(3)],
     lambda q, k, v: jax.nn.dot_product_attention(q.transpose(1, 0, 2)[None], k.transpose(1, 0, 2)[None],
                                                  v.transpose(1, 0, 2)[None], is_causal=True,
                                                  scale=1.0)[0].transpose(1, 0, 2))
case("paged_attention_f32_b2_h1_p8x16_d128", paged(4),
     lambda r: [jnp.asarray(r.standard_normal((2, 1, 128)), jnp.float32),
                jnp.asarray(r.standard_normal((1, 8, 16, 128)), jnp.float32),
                jnp.asarray(r.standard_normal((1, 8, 16, 128)), jnp.float32),
                jnp.asarray([60, 23], jnp.int32), jnp.asarray([[3, 0, 7, 1], [6, 2, 4, 5]], jnp.int32)],
     None)  # no independent jnp reference: interpret mode is the only one

_pack = pack_unpack()
case("pack_unpack_elementwise_8x128", _pack,
     lambda r: [jnp.asarray(r.standard_normal((8, 128)) * 100, jnp.float32),
                jnp.asarray(np.concatenate([r.standard_normal((4, 128)) * 100,  # ties: bf16 halfway values
                                            np.float32(1 + 2.0 ** -8) * (1 + np.arange(512).reshape(4, 128))]),
                            jnp.float32),
                jnp.asarray(r.integers(-2 ** 31, 2 ** 31, (8, 128)), jnp.int32)],
     pack_reference)

case("int4_cast_wrap_i32_16x128", int4_casts(),
     lambda r: [jnp.asarray(r.integers(-100, 100, (16, 128)), jnp.int32), jnp.asarray(r.integers(-40, 40, (16, 128)), jnp.int32)],
     lambda a, b: [((a + 8) % 16 - 8), ((b + 8) % 16 - 8)])

case("megablox_gmm_f32_256x128x128_g4", megablox((64, 128, 128)),
     lambda r: [jnp.asarray(r.standard_normal((256, 128)), jnp.float32), jnp.asarray(r.standard_normal((4, 128, 128)), jnp.float32),
                jnp.asarray([64, 0, 100, 92], jnp.int32)],
     gmm_reference)


def _rpa_reference(q, kv, lens, pages, cu, n):
    from jax.experimental.pallas.ops.tpu.ragged_paged_attention import ref_ragged_paged_attention
    return ref_ragged_paged_attention(q, kv, lens, pages, cu, n)


_rpa = ragged_paged(2, 8)
NO_INTERPRET = [_rpa, _pack]
case("ragged_paged_attention_f32_t16_h2_p16x16_d128", _rpa,
     lambda r: [jnp.asarray(r.standard_normal((16, 2, 128)), jnp.float32),
                jnp.asarray(r.standard_normal((16, 16, 2, 128)), jnp.float32),
                jnp.asarray([20, 33, 40], jnp.int32), jnp.asarray([[3, 0, 7, 1], [6, 2, 4, 5], [8, 9, 10, 11]], jnp.int32),
                jnp.asarray([0, 8, 9, 16], jnp.int32), jnp.asarray([3], jnp.int32)],
     _rpa_reference)


# User-style kernels of bench/pallas/user.py whose ops the library kernels above do not use
# (pltpu.roll with and without a stride, argmax/argmin, pl.run_scoped, strided ref reads,
# a nested emit_pipeline, DMA out of VMEM into an ANY output; static row slices of a vector,
# vector.extract_strided_slice with an array of offsets; tpu.reciprocal; tpu.dynamic_gather;
# pl.Element windows; arith.cmpf one on NaN): their values are pinned here.
USER = ["alias_roll_concat_f32_16x256", "cond_argmax_f32_16x128", "run_scoped_dma_f32_64x128",
        "strided_reshape_f32_32x256", "intdiv_roll_stride_argmin_32x128", "emit_pipeline_add_f32_64x256",
        "manual_dma_inout_f32_128x128", "accum_leading_dim_f32_4x64x128", "int8_uint32_ops_32x128",
        "r2_fori_prefix_rows_f32_64x128", "r6_reciprocal_rownorm_f32_128x256", "r6_take_along_lanes_f32_8x128",
        "r6_element_offsets_rows_f32_4x8x128", "r7_nan_inf_clean_f32_16x128"]


def _user_cases():
    import user
    for name, fn, make_args in user.CASES:
        if name in USER:
            case("user_" + name, fn, lambda r, mk=make_args: mk(r), None)


_user_cases()

# Kernels of bench/pallas/bulk.py (generated in bulk) that found a fault, pinned here: math.tan
# and tpu.weird (jnp.isfinite) refused as not modelled before; pltpu.bitcast between widths
# (refused before); float8 casts inside a kernel (not rounded to float8 before); pl.debug_print
# of scalars and of a vector (tpu.log, tpu.log_buffer: refused before).
BULK = ["ew_tan_f32_32x256_b8x128", "ew_isfin_f32_32x256_b8x128", "bits_bitcast_bf16_i32", "bits_bitcast_i32_i8",
        "bits_cast_f32_f8e5", "bits_cast_bf16_f8e4", "misc_debug_print_vec", "misc_num_programs"]


def _bulk_cases():
    import bulk
    for _, name, fn, make_args in bulk.all_cases():
        if name in BULK:
            case("bulk_" + name, fn, make_args, None)


_bulk_cases()


def write(name, fn, make_args, reference):
    args = make_args(rng(name))
    d = os.path.join(OUT, name)
    os.makedirs(d, exist_ok=True)
    from jax.sharding import SingleDeviceSharding
    dev = tpu_device()
    sds = [jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=SingleDeviceSharding(dev)) for a in args]
    with jax.default_device(dev):  # kernels that ask the TPU's kind while lowering
        text = jax.jit(fn).lower(*sds).as_text(dialect="hlo")
    text = pallas_decode.decode_hlo(text)
    with open(os.path.join(d, "prog.hlo"), "w") as f:
        f.write(text)
    for i, a in enumerate(args):
        np.save(os.path.join(d, "in%d.npy" % i), np.asarray(a.astype(jnp.float32) if a.dtype == jnp.bfloat16 else a))
    cpu = jax.devices("cpu")[0]
    ref = jax.tree_util.tree_leaves(reference(*args)) if reference else None
    if fn in NO_INTERPRET:  # only the jnp reference: the test reads ref.npy
        interp = [None] * len(ref)
    else:
        with jax.default_device(dev):  # traced as for the TPU, run on CPU (the arguments' device)
            interp = jax.tree_util.tree_leaves(jax.jit(lambda *a: fn(*a, interpret=True))(
                *[jax.device_put(a, cpu) for a in args]))
    ref = ref or [None] * len(interp)
    worst = 0.0
    for i, (a, b) in enumerate(zip(interp, ref)):  # interp0.npy ... for several results
        sfx = "" if len(interp) == 1 else str(i)
        if a is None:  # integer results exactly; floats as f32
            b_np = np.asarray(b)
            np.save(os.path.join(d, "ref%s.npy" % sfx), b_np if b_np.dtype.kind in "iu" else np.asarray(b, np.float32))
            continue
        a_np = np.asarray(a)  # integer results exactly; floats as f32
        np.save(os.path.join(d, "interp%s.npy" % sfx), a_np if a_np.dtype.kind in "iu" else np.asarray(a, np.float32))
        if b is not None:
            np.save(os.path.join(d, "ref%s.npy" % sfx), np.asarray(b, np.float32))
            worst = max(worst, float(np.max(np.abs(np.asarray(a, np.float32) - np.asarray(b, np.float32)))))
    print("%-40s %-4s interp vs jnp max |diff| %.3g" % (name, split(name), worst))


# Collective kernels: a pallas_call inside shard_map over a mesh of a pod, lowered for a v5e
# slice of that many chips (a module of n partitions) and run in Pallas's TPU interpret mode on
# n CPU devices. Each case: (name, topology, mesh shape, axis names, in spec, out spec,
# per-device kernel builder f(mesh) -> g(x_shard), input maker, reference).
POD_CASES = []


def pod_case(name, topology, mesh_shape, axes, in_spec, out_spec, build, make_input, reference):
    POD_CASES.append((name, topology, mesh_shape, axes, in_spec, out_spec, build, make_input, reference))


def _all_gather(mesh):
    from jax.experimental.pallas.ops.tpu import all_gather as ag
    return lambda x: ag.all_gather(x, mesh=mesh, axis_name="x")


def _right_permute(mesh, shift=1):
    """The Pallas distributed guide's first kernel: each device's block to its right
    neighbour along "x" (mesh device ids, a remote copy between ANY refs); with a shift, to
    the device that many places to the right."""
    n = mesh.shape["x"]

    def kernel(x_ref, o_ref, send_sem, recv_sem):
        right = jax.lax.rem(jax.lax.axis_index("x") + shift, n)
        cp = pltpu.make_async_remote_copy(src_ref=x_ref, dst_ref=o_ref, send_sem=send_sem, recv_sem=recv_sem,
                                          device_id=(right,), device_id_type=pltpu.DeviceIdType.MESH)
        cp.start()
        cp.wait()

    def local(x):
        return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                              grid_spec=pltpu.PrefetchScalarGridSpec(
                                  num_scalar_prefetch=0, in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
                                  out_specs=pl.BlockSpec(memory_space=pl.ANY),
                                  scratch_shapes=[pltpu.SemaphoreType.DMA] * 2))(x)
    return _shard(mesh, local, P("x"), P("x"))


def _ring_allreduce(mesh):
    """A user's ring all-reduce over "y" of a 2-D mesh (x, y): N-1 steps, each forwarding the
    block it holds to the right neighbour's receive slot for that step (a slot a step: no
    overwrite), then adding what came from the left; device ids as mesh coordinates."""
    n = mesh.shape["y"]

    def kernel(x_ref, o_ref, slots, send_sem, recv_sem):
        me_x = jax.lax.axis_index("x")
        right = jax.lax.rem(jax.lax.axis_index("y") + 1, n)
        o_ref[...] = x_ref[...]
        for s in range(n - 1):
            src = x_ref if s == 0 else slots.at[s - 1]
            cp = pltpu.make_async_remote_copy(src_ref=src, dst_ref=slots.at[s], send_sem=send_sem, recv_sem=recv_sem,
                                              device_id=(me_x, right), device_id_type=pltpu.DeviceIdType.MESH)
            cp.start()
            cp.wait()
            o_ref[...] += slots[s]

    def local(x):
        return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                              in_specs=[pl.BlockSpec(memory_space=pltpu.VMEM)],
                              out_specs=pl.BlockSpec(memory_space=pltpu.VMEM),
                              scratch_shapes=[pltpu.VMEM((n - 1,) + x.shape, x.dtype), pltpu.SemaphoreType.DMA,
                                              pltpu.SemaphoreType.DMA])(x)
    return _shard(mesh, local, P("x", "y"), P("x", "y"))


def _shard(mesh, local, ins, outs):
    from jax._src import shard_map
    return lambda x: shard_map.shard_map(local, mesh=mesh, in_specs=ins, out_specs=outs, check_vma=False)(x)


def _ring_ref(x):  # x: (2*r, 4*c) blocks over (x, y): every block of a row of the mesh becomes their sum
    r, c = x.shape[0] // 2, x.shape[1] // 4
    b = x.reshape(2, r, 4, c).sum(axis=2, keepdims=True)
    return np.broadcast_to(b, (2, r, 4, c)).reshape(x.shape)


P = jax.sharding.PartitionSpec
pod_case("all_gather_f32_4dev_32x128", "v5e:2x2", (4,), ("x",), P("x"), None, _all_gather,
         lambda r: jnp.asarray(r.standard_normal((32, 128)), jnp.float32), lambda x: x)
pod_case("all_gather_bf16_8dev_128x256", "v5e:2x4", (8,), ("x",), P("x"), None, _all_gather,
         lambda r: jnp.asarray(r.standard_normal((128, 256)), jnp.bfloat16), lambda x: x)
pod_case("right_permute_f32_4dev_32x128", "v5e:2x2", (4,), ("x",), P("x"), P("x"), _right_permute,
         lambda r: jnp.asarray(r.standard_normal((32, 128)), jnp.float32),
         lambda x: np.roll(np.asarray(x).reshape(4, 8, 128), 1, axis=0).reshape(32, 128))
pod_case("permute_by2_f32_4dev_32x128", "v5e:2x2", (4,), ("x",), P("x"), P("x"), lambda m: _right_permute(m, 2),
         lambda r: jnp.asarray(r.standard_normal((32, 128)), jnp.float32),
         lambda x: np.roll(np.asarray(x).reshape(4, 8, 128), 2, axis=0).reshape(32, 128))
pod_case("ring_allreduce_f32_2x4dev_16x512", "v5e:2x4", (2, 4), ("x", "y"), P("x", "y"), P("x", "y"), _ring_allreduce,
         lambda r: jnp.asarray(r.standard_normal((16, 512)), jnp.float32), _ring_ref)


def write_pod(name, topology, mesh_shape, axes, in_spec, out_spec, build, make_input, reference):
    """prog.hlo (lowered for the TPU slice), in0.npy (the global input, sharded by in_spec),
    interp.npy (the global result of Pallas's TPU interpret mode on as many CPU devices, DMAs
    run at their start: dma_execution_mode="eager"; its default "on_wait" leaves the last
    half-shards each device of all_gather receives unset, NaN, in jax 0.10.2) and ref.npy (the
    reference). out_spec None: a replicated result (all_gather), the same on every device."""
    from jax.experimental import topologies
    from jax.sharding import Mesh, NamedSharding
    ndev = int(np.prod(mesh_shape))
    d = os.path.join(OUT, name)
    os.makedirs(d, exist_ok=True)
    x = make_input(rng(name))
    tdevs = topologies.get_topology_desc(platform="tpu", topology_name=topology).devices[:ndev]
    tmesh = Mesh(np.array(tdevs).reshape(mesh_shape), axes)
    sds = jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=NamedSharding(tmesh, in_spec))
    with jax.default_device(tdevs[0]):
        text = jax.jit(build(tmesh)).trace(sds).lower(lowering_platforms=("tpu",)).as_text(dialect="hlo")
    with open(os.path.join(d, "prog.hlo"), "w") as f:
        f.write(pallas_decode.decode_hlo(text))
    np.save(os.path.join(d, "in0.npy"), np.asarray(x, np.float32))
    cmesh = Mesh(np.array(jax.devices("cpu")[:ndev]).reshape(mesh_shape), axes)
    xs = jax.device_put(x, NamedSharding(cmesh, in_spec))
    with interpreting(pltpu.InterpretParams(dma_execution_mode="eager")):
        out = build(cmesh)(xs)
    if out_spec is None:
        shards = [np.asarray(s.data, np.float32) for s in out.addressable_shards]
        for s in shards[1:]:  # every device holds the whole result
            assert np.array_equal(s, shards[0]), name
        got = shards[0]
    else:
        got = np.asarray(out, np.float32)
    np.save(os.path.join(d, "interp.npy"), got)
    ref = np.asarray(reference(np.asarray(x, np.float32)), np.float32)
    np.save(os.path.join(d, "ref.npy"), ref)
    print("%-40s %-4s interp vs jnp max |diff| %.3g" % (name, split(name), float(np.max(np.abs(got - ref)))))


def main(argv):
    for name, fn, make_args, reference in CASES:
        if argv and not any(s in name for s in argv):
            continue
        write(name, fn, make_args, reference)
    for c in POD_CASES:
        if argv and not any(s in c[0] for s in argv):
            continue
        write_pod(*c)


if __name__ == "__main__":
    main(sys.argv[1:])
