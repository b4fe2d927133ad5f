#!/usr/bin/env python3
"""gen.py: the SPMD fidelity corpus — sharded JAX programs at the sizes people train and
serve, each beside the XLA TPU compiler's own partitioned program (libtpu in compile-only
mode: no TPU needed).

    pip install "jax[tpu]==0.10.2"                 # jax 0.10.2 + libtpu 0.0.42.1 here
    python3 bench/spmd/gen.py [NAME_SUBSTRING...]   # about 5-20 s per program on 2 cores
                                                    # (SPMD_KEEP=1: skip cases already written)
    python3 bench/spmd_partdump.py --tpu bench/spmd/cases   # the partitioner's output alone
    python3 bench/spmd_compare.py bench/spmd/cases --markdown

Writes bench/spmd/cases/NAME/: prog.hlo (jax.jit(f).lower(...).as_text(dialect="hlo") with
its shardings: tpusim's input), tpu.hlo (the TPU compiler's final partitioned program) and
meta.json (chip, topology, devices, the result shardings the compiled text omits, the
compiler's collectives and the sum of its estimated_cycles). No input values: the corpus
is for timing and communication (tests/tpu and tests/pod hold the small programs whose
values are checked). Each strategy of docs/spmd.md — data parallelism, FSDP, tensor
parallelism, sequence parallelism, expert parallelism, the 3-D mix — at the shapes of a
1-2 B-parameter transformer layer, on v5e 2x4 / 4x4 and v5p 2x2x2 slices. Nothing in the
tests runs this script: they read the committed files."""
import json, os, re, shutil, sys
os.environ.setdefault("TPU_ACCELERATOR_TYPE", "v5litepod-8")
os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")
import numpy as np
import jax, jax.numpy as jnp
from jax.experimental import topologies
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "cases")
BF, F32, I32 = jnp.bfloat16, jnp.float32, jnp.int32
_topo = {}
CHIP = {"v5e:2x4": "v5e", "v5e:4x4": "v5e", "v5p:2x2x2": "v5p"}


def mesh(topology, shape, axes):
    if topology not in _topo:
        _topo[topology] = topologies.get_topology_desc(platform="tpu", topology_name=topology)
    return Mesh(np.array(_topo[topology].devices).reshape(shape), axes)


def _tpu_gen():
    """tests/tpu/gen.py, for its full_text (the compiled text with large constants)."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("tpu_case_gen", os.path.join(HERE, "..", "..", "tests", "tpu", "gen.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


full_text = _tpu_gen().full_text


CASES = []


def case(name, f, args, specs, topology="v5e:2x4", shape=(2, 4), axes=("data", "model")):
    CASES.append((name, f, args, specs, topology, shape, axes))


def run(name, f, args, specs, topology, shape, axes):
    m = mesh(topology, shape, axes)
    sds = [jax.ShapeDtypeStruct(s, t, sharding=NamedSharding(m, P(*sp))) for (s, t), sp in zip(args, specs)]
    with jax.set_mesh(m):
        lowered = jax.jit(f).lower(*sds)
        c = lowered.compile()
        shapes = jax.tree_util.tree_leaves(jax.eval_shape(f, *sds))
    d = os.path.join(OUT, name)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    txt = c.as_text()
    open(os.path.join(d, "tpu.hlo"), "w").write(full_text(c))
    open(os.path.join(d, "prog.hlo"), "w").write(lowered.as_text(dialect="hlo"))
    outs = c.output_shardings
    outs = list(outs) if isinstance(outs, (list, tuple)) else [outs]
    outs = jax.tree_util.tree_leaves(outs)
    entry = txt[txt.rfind("\nENTRY"):]
    ca = c.cost_analysis()
    ca = ca[0] if isinstance(ca, list) else ca
    json.dump({"name": name, "chip": CHIP[topology], "topology": topology, "devices": int(np.prod(shape)),
               "mesh": dict(zip(axes, shape)), "jax": jax.__version__,
               "out_shardings": [str(o._to_xla_hlo_sharding(len(sh.shape))) for o, sh in zip(outs, shapes)],
               "estimated_cycles": sum(int(x) for x in re.findall(r'"estimated_cycles":"(\d+)"', entry)),
               "flops": ca.get("flops"),
               "collectives": sorted(set(re.findall(r" (all-reduce|all-gather|reduce-scatter|all-to-all|"
                                                    r"collective-permute)(?:-start)?\(", txt)))},
              open(os.path.join(d, "meta.json"), "w"), indent=1)
    print(name, flush=True)


# ---- model pieces (a 1-2 B-parameter transformer layer: d 2048, 16 heads of 128, MLP 8192)
D, H, DH, F, S, V = 2048, 16, 128, 8192, 1024, 32768


def mlp(x, w1, w2):
    return jax.nn.gelu(x @ w1) @ w2


def swiglu(x, wg, wu, wd):
    return (jax.nn.silu(x @ wg) * (x @ wu)) @ wd


def rmsnorm(x, g):
    x32 = x.astype(F32)
    return (x32 * jax.lax.rsqrt((x32 * x32).mean(-1, keepdims=True) + 1e-6) * g).astype(x.dtype)


def attention(x, wqkv, wo):
    qkv = jnp.einsum("bsd,dthk->tbshk", x, wqkv)
    q, k, v = qkv[0], qkv[1], qkv[2]
    s = jnp.einsum("bqhk,bshk->bhqs", q, k).astype(F32) / np.sqrt(q.shape[-1])
    mask = jnp.tril(jnp.ones((q.shape[1], k.shape[1]), bool))
    p = jax.nn.softmax(jnp.where(mask, s, -1e9), -1).astype(x.dtype)
    return jnp.einsum("bhqs,bshk,hkd->bqd", p, v, wo)


def block(x, g1, wqkv, wo, g2, w1, w2):
    h = x + attention(rmsnorm(x, g1), wqkv, wo)
    return h + mlp(rmsnorm(h, g2), w1, w2)


def train(fn, nparams):
    """An SGD step of sum(fn(*params, x)**2)'s gradient over the first nparams arguments."""
    def step(*a):
        ps, data = a[:nparams], a[nparams:]
        loss = lambda ps: jnp.mean(jnp.square(fn(*data[:1], *ps).astype(F32)))
        g = jax.grad(loss)(ps)
        return tuple(p - (1e-3 * d).astype(p.dtype) for p, d in zip(ps, g))
    return step


def block_params(dt=BF):
    return [((D,), F32), ((D, 3, H, DH), dt), ((H, DH, D), dt), ((D,), F32), ((D, F), dt), ((F, D), dt)]


def cases():
    x_tok = lambda b: ((b, D), BF)
    # 1. data parallelism: batch split, weights replicated, gradients all-reduced
    case("dp_mlp_step", train(mlp, 2), [((D, F), BF), ((F, D), BF), x_tok(8192)],
         [(None, None), (None, None), ("data", None)], shape=(8,), axes=("data",))
    case("dp_mlp_step_f32", train(mlp, 2), [((D, F), F32), ((F, D), F32), ((8192, D), F32)],
         [(None, None), (None, None), ("data", None)], shape=(8,), axes=("data",))
    bx = ((16, S, D), BF)
    case("dp_block_step", train(block, 6), block_params() + [bx],
         [(None,)] + [(None,) * 4, (None,) * 3, (None,), (None, None), (None, None)] + [("data", None, None)],
         shape=(8,), axes=("data",))
    case("dp_conv_step", train(lambda x, w1, w2: jax.nn.relu(conv(jax.nn.relu(conv(x, w1)), w2)), 2),
         [((3, 3, 128, 128), BF), ((3, 3, 128, 128), BF), ((64, 28, 28, 128), BF)],
         [(None,) * 4, (None,) * 4, ("data", None, None, None)], shape=(8,), axes=("data",))
    case("dp16_mlp_step", train(mlp, 2), [((D, F), BF), ((F, D), BF), x_tok(16384)],
         [(None, None), (None, None), (("data", "model"), None)], topology="v5e:4x4", shape=(4, 4))
    # 2. FSDP: weights split along their first dimension, gathered before use, gradients reduce-scattered
    case("fsdp_mlp_step", train(mlp, 2), [((D, F), BF), ((F, D), BF), x_tok(8192)],
         [("fsdp", None), ("fsdp", None), ("fsdp", None)], shape=(8,), axes=("fsdp",))
    case("fsdp_block_step", train(block, 6), block_params() + [bx],
         [("fsdp",), ("fsdp", None, None, None), ("fsdp", None, None), ("fsdp",), ("fsdp", None), ("fsdp", None),
          ("fsdp", None, None)], shape=(8,), axes=("fsdp",))
    case("fsdp_swiglu_step", train(swiglu, 3), [((D, F), BF), ((D, F), BF), ((F, D), BF), x_tok(8192)],
         [("fsdp", None), ("fsdp", None), (None, "fsdp"), ("fsdp", None)], shape=(8,), axes=("fsdp",))
    case("fsdp_scan_step", train(lambda x, ws: jax.lax.scan(lambda c, w: (jnp.tanh(c @ w), None), x, ws)[0], 1),
         [((4, D, D), BF), x_tok(8192)], [(None, "fsdp", None), ("fsdp", None)], shape=(8,), axes=("fsdp",))
    case("fsdp_dp_mlp_step", train(mlp, 2), [((D, F), BF), ((F, D), BF), x_tok(16384)],
         [("fsdp", None), ("fsdp", None), (("data", "fsdp"), None)], topology="v5e:4x4", shape=(4, 4),
         axes=("data", "fsdp"))
    # 3. tensor parallelism (Megatron: column- then row-parallel, one all-reduce per block)
    tp = [(None, "model"), ("model", None)]
    case("tp_mlp_fwd", mlp, [x_tok(4096), ((D, F), BF), ((F, D), BF)], [("data", None)] + tp)
    case("tp_mlp_step", train(mlp, 2), [((D, F), BF), ((F, D), BF), x_tok(4096)], tp + [("data", None)])
    case("tp_swiglu_fwd", swiglu, [x_tok(4096), ((D, F), BF), ((D, F), BF), ((F, D), BF)],
         [("data", None), (None, "model"), (None, "model"), ("model", None)])
    tpb = [(None,), (None, None, "model", None), ("model", None, None), (None,), (None, "model"), ("model", None)]
    case("tp_attention_fwd", attention, [((8, S, D), BF), ((D, 3, H, DH), BF), ((H, DH, D), BF)],
         [("data", None, None), (None, None, "model", None), ("model", None, None)])
    case("tp_block_fwd", block, [((8, S, D), BF)] + block_params(), [("data", None, None)] + tpb)
    case("tp_block_step", train(block, 6), block_params() + [((8, S, D), BF)], tpb + [("data", None, None)])
    case("tp16_block_step", train(block, 6), block_params() + [((16, S, D), BF)], tpb + [("data", None, None)],
         topology="v5e:4x4", shape=(4, 4))
    case("tp_decode_attention", lambda q, k, v: jnp.einsum(
        "bhs,bshk->bhk", jax.nn.softmax(jnp.einsum("bhk,bshk->bhs", q, k).astype(F32) / 11.3, -1).astype(BF), v),
         [((64, H, DH), BF), ((64, 4096, H, DH), BF), ((64, 4096, H, DH), BF)],
         [("data", "model", None), ("data", None, "model", None), ("data", None, "model", None)])
    case("tp_decode_mlp", swiglu, [x_tok(64), ((D, F), BF), ((D, F), BF), ((F, D), BF)],
         [(None, None), (None, "model"), (None, "model"), ("model", None)])
    case("tp_layernorm", rmsnorm, [((4096, D), BF), ((D,), F32)], [("data", "model"), ("model",)])
    # 4. sequence parallelism
    qkv = ((8, S, H, DH), BF)
    case("sp_attention", lambda q, k, v: jnp.einsum("bhqs,bshk->bqhk", jax.nn.softmax(
        jnp.einsum("bqhk,bshk->bhqs", q, k).astype(F32) / 11.3, -1).astype(BF), v),
         [qkv, qkv, qkv], [("data", "model", None, None)] * 3)
    case("sp_mlp_fwd", lambda x, g, w1, w2: mlp(rmsnorm(x, g), w1, w2),
         [((8, S, D), BF), ((D,), F32), ((D, F), BF), ((F, D), BF)],
         [("data", "model", None), (None,), (None, "model"), ("model", None)])
    case("sp_norm_step", train(lambda x, g: rmsnorm(x, g) * 2, 1), [((D,), F32), ((8, S, D), BF)],
         [(None,), ("data", "model", None)])
    # 5. expert parallelism: tokens re-split from the batch to the experts (all-to-all)
    def moe(x, wr, w1, w2):
        e, c = w1.shape[0], x.shape[0] * 2 // w1.shape[0]
        gate = jax.nn.softmax((x @ wr).astype(F32), -1)
        top = jax.lax.top_k(gate, 2)[1]
        disp = jax.nn.one_hot(top, e, dtype=BF).sum(1)                       # [T, E]
        pos = (jnp.cumsum(disp, 0) - 1) * disp
        slot = jax.nn.one_hot(pos.astype(I32), c, dtype=BF) * disp[..., None]  # [T, E, C]
        xe = jnp.einsum("tec,td->ecd", slot, x)
        xe = jax.lax.with_sharding_constraint(xe, P("model", None, None))
        ye = jnp.einsum("ecf,efd->ecd", jax.nn.gelu(jnp.einsum("ecd,edf->ecf", xe, w1)), w2)
        ye = jax.lax.with_sharding_constraint(ye, P(None, ("data", "model"), None))
        return jnp.einsum("tec,ecd->td", slot, ye)
    case("ep_moe_fwd", moe, [x_tok(4096), ((D, 8), BF), ((8, D, 4096), BF), ((8, 4096, D), BF)],
         [(("data", "model"), None), (None, None), ("model", None, None), ("model", None, None)])
    case("ep_expert_ffn", lambda xe, w1, w2: jnp.einsum("ecf,efd->ecd", jax.nn.gelu(jnp.einsum("ecd,edf->ecf", xe, w1)), w2),
         [((8, 1024, D), BF), ((8, D, 4096), BF), ((8, 4096, D), BF)],
         [("model", "data", None), ("model", None, None), ("model", None, None)])
    case("ep_dispatch", lambda x: jax.lax.with_sharding_constraint(x.reshape(8, 4, 1024, D) * 2, P("model", "data", None, None)),
         [((8 * 4096, D), BF)], [(("data", "model"), None)])
    # 6. embeddings and the vocabulary-split head
    case("embed_vocab", lambda t, e: e[t], [((8, S), I32), ((V, D), BF)], [("data", None), ("model", None)])
    case("embed_dmodel", lambda t, e: e[t], [((8, S), I32), ((V, D), BF)], [("data", None), (None, "model")])

    def xent(h, w, lab):
        logits = (h @ w).astype(F32)
        return jnp.mean(jax.nn.logsumexp(logits, -1) - jnp.take_along_axis(logits, lab[:, None], 1)[:, 0])
    case("lmhead_xent_step", lambda w, h, lab: w - 1e-3 * jax.grad(xent, argnums=1)(h, w, lab).astype(BF),
         [((D, V), BF), x_tok(4096), ((4096,), I32)], [(None, "model"), ("data", None), ("data",)])
    case("softmax_vocab", lambda x: jax.nn.softmax(x.astype(F32), -1), [((512, V), BF)], [("data", "model")])
    # 7. the 3-D mix: (data, fsdp, tensor)
    b3 = [(None,), ("fsdp", None, "tensor", None), ("tensor", None, "fsdp"), (None,), ("fsdp", "tensor"),
          ("tensor", "fsdp")]
    case("mix3d_block_step", train(block, 6), block_params() + [((8, S, D), BF)],
         b3 + [(("data", "fsdp"), None, None)], shape=(2, 2, 2), axes=("data", "fsdp", "tensor"))
    case("mix3d_block_fwd", block, [((8, S, D), BF)] + block_params(), [(("data", "fsdp"), None, None)] + b3,
         shape=(2, 2, 2), axes=("data", "fsdp", "tensor"))
    case("mix3d_v5p_block_step", train(block, 6), block_params() + [((8, S, D), BF)],
         b3 + [(("data", "fsdp"), None, None)], topology="v5p:2x2x2", shape=(2, 2, 2), axes=("data", "fsdp", "tensor"))
    # 8. resharding and 2-D matmuls
    case("reshard_rows_to_cols", lambda x: jax.lax.with_sharding_constraint(x * 2, P(None, "data")),
         [((8192, D), BF)], [("data", None)], shape=(8,), axes=("data",))
    case("gemm_2d", lambda a, b: a @ b, [((8192, D), BF), ((D, F), BF)], [("data", None), (None, "model")])
    case("gemm_contract_split", lambda a, b: jax.lax.with_sharding_constraint(a @ b, P("model", None)),
         [((8192, F), BF), ((F, D), BF)], [(None, "model"), ("model", None)])


def conv(x, w):
    return jax.lax.conv_general_dilated(x, w, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"))


def main():
    cases()
    want = sys.argv[1:]
    for c in CASES:
        if os.environ.get("SPMD_KEEP") and os.path.exists(os.path.join(OUT, c[0], "meta.json")):
            continue
        if not want or any(w in c[0] for w in want):
            run(*c)


if __name__ == "__main__":
    main()
