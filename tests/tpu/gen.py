#!/usr/bin/env python3
"""gen.py: programs as the real XLA TPU compiler compiles them (libtpu in compile-only mode,
no TPU needed), beside the programs they came from.

    pip install "jax[tpu]==0.10.2"     # brings libtpu (0.0.42.1 here)
    python3 tests/tpu/gen.py

Each case in tests/tpu/cases/NAME/: prog.hlo (JAX's lowered program), tpu.hlo (the TPU
compiler's optimized program for one v5e chip: tiled layouts, S(n) memory spaces,
copy-start/copy-done, fusions with backend_config, convolutions standing for dots, custom
calls), in*.npy inputs and meta.json (the compiler's cost_analysis flops and the sum of
its estimated_cycles)."""
import json, os, re, shutil
import jax, jax.numpy as jnp, numpy as np
from jax.experimental import topologies
from jax.sharding import SingleDeviceSharding

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "cases")
topo = topologies.get_topology_desc(platform="tpu", topology_name="v5e:2x2")
dev = topo.devices[0]
r = np.random.RandomState(0)


def S(a):
    return jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=SingleDeviceSharding(dev))


def full_text(c):
    """The compiled program's text, large constants included (the default printer elides them)."""
    txt = c.as_text()
    if "{...}" not in txt:
        return txt
    import jaxlib._hlo as H
    o = H.HloPrintOptions()
    o.print_large_constants = True
    return c.runtime_executable().hlo_modules()[0].to_string(o)


def case(name, f, args):
    c = jax.jit(f).lower(*[S(a) for a in args]).compile()
    d = os.path.join(OUT, name)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    txt = c.as_text()
    open(os.path.join(d, "tpu.hlo"), "w").write(full_text(c))
    open(os.path.join(d, "prog.hlo"), "w").write(jax.jit(f).lower(*args).as_text(dialect="hlo"))
    for i, a in enumerate(args):
        np.save(os.path.join(d, f"in{i}.npy"), a.astype(np.float32) if a.dtype.name == "bfloat16" else a)
    entry = txt[txt.rfind("\nENTRY"):]
    ca = c.cost_analysis()
    ca = ca[0] if isinstance(ca, list) else ca
    json.dump({"name": name, "chip": "v5e", "jax": jax.__version__,
               "estimated_cycles": sum(int(x) for x in re.findall(r'"estimated_cycles":"(\d+)"', entry)),
               "flops": ca.get("flops"), "custom_calls": sorted(set(re.findall(r'custom_call_target="([^"]+)"', txt)))},
              open(os.path.join(d, "meta.json"), "w"), indent=1)
    print(name)


POD = topologies.get_topology_desc(platform="tpu", topology_name="v5e:2x4")


def pod_case(name, f, args, specs, axes=("data", "model"), shape=(2, 4)):
    """A program sharded over 8 v5e chips: the TPU compiler's partitioned program (tpu.hlo,
    its collectives, its fused reduce-scatters), JAX's lowered sharded program (prog.hlo, for
    tpusim's own partitioner), global inputs, and the result shardings the compiled text
    omits (meta.json "out_shardings", HLO syntax)."""
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
    mesh = Mesh(np.array(POD.devices).reshape(shape), axes)
    sds = [jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=NamedSharding(mesh, P(*sp))) for a, sp in zip(args, specs)]
    c = jax.jit(f).lower(*sds).compile()
    d = os.path.join(OUT, name)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    open(os.path.join(d, "tpu.hlo"), "w").write(full_text(c))
    open(os.path.join(d, "prog.hlo"), "w").write(jax.jit(f).lower(*sds).as_text(dialect="hlo"))
    for i, a in enumerate(args):
        np.save(os.path.join(d, f"in{i}.npy"), a)
    outs = c.output_shardings
    outs = list(outs) if isinstance(outs, (list, tuple)) else [outs]
    shapes = jax.tree_util.tree_leaves(jax.eval_shape(f, *args))
    entry = c.as_text()[c.as_text().rfind("\nENTRY"):]
    json.dump({"name": name, "chip": "v5e", "topology": "v5e:2x4", "devices": 8, "jax": jax.__version__,
               "out_shardings": [str(o._to_xla_hlo_sharding(len(sh.shape))) for o, sh in zip(outs, shapes)],
               "estimated_cycles": sum(int(x) for x in re.findall(r'"estimated_cycles":"(\d+)"', entry)),
               "collectives": sorted(set(re.findall(r" (all-reduce|all-gather|reduce-scatter|all-to-all|"
                                                    r"collective-permute)(?:-start)?\(", c.as_text())))},
              open(os.path.join(d, "meta.json"), "w"), indent=1)
    print(name)


def pod_cases():
    def mlp_step(w1, w2, x, y):
        def loss(a, b):
            return jnp.mean((jnp.tanh(x @ a) @ b - y) ** 2)
        g1, g2 = jax.grad(loss, argnums=(0, 1))(w1, w2)
        return w1 - 0.1 * g1, w2 - 0.1 * g2

    args = [f32(128, 256, scale=0.05), f32(256, 64, scale=0.05), f32(64, 128), f32(64, 64)]
    pod_case("pod_dp_mlp", mlp_step, args, [(None, None), (None, None), ("data", None), ("data", None)])
    pod_case("pod_fsdp_mlp", mlp_step, args, [("model", None), ("model", None), ("data", None), ("data", None)])
    pod_case("pod_megatron", lambda x, a, b: jnp.tanh(x @ a) @ b, [f32(32, 128), f32(128, 256, scale=0.05),
                                                                   f32(256, 128, scale=0.05)],
             [("data", None), (None, "model"), ("model", None)])
    pod_case("pod_rowsum", lambda x: (x.sum(1), x * 2), [f32(64, 256)], [("data", "model")])

    def attn(q, k, v):
        s = jnp.einsum("bqd,bkd->bqk", q, k) / 8.0
        return jnp.einsum("bqk,bkd->bqd", jax.nn.softmax(s, -1), v)

    qkv = [f32(4, 64, 32) for _ in range(3)]
    pod_case("pod_seq_attention", attn, qkv, [("data", "model", None)] * 3)  # sequence parallel

    def moe(x, w):  # tokens dispatched per expert, experts split over "model"
        return jnp.tanh(jnp.einsum("ecd,edf->ecf", x, w))

    pod_case("pod_moe", moe, [f32(8, 16, 32), f32(8, 32, 64, scale=0.2)], [(None, "data", None), ("model", None, None)])
    pod_case("pod_embed", lambda t, e: e[t] * 2.0, [r.randint(0, 64, size=(16, 8)).astype(np.int32), f32(64, 32)],
             [("data", None), ("model", None)])
    conv = lambda x, w: jax.nn.relu(jax.lax.conv_general_dilated(x, w, (1, 1), "SAME",
                                                                  dimension_numbers=("NHWC", "HWIO", "NHWC")))
    pod_case("pod_conv_spatial", conv, [f32(2, 32, 16, 4), f32(3, 3, 4, 8, scale=0.3)],
             [("data", "model", None, None), (None, None, None, None)])

    def ln(x, g):
        m = x.mean(-1, keepdims=True)
        v = ((x - m) ** 2).mean(-1, keepdims=True)
        return (x - m) * jax.lax.rsqrt(v + 1e-5) * g

    pod_case("pod_layernorm_tp", ln, [f32(32, 256), f32(256)], [("data", "model"), ("model",)])

    def scan_layers(x, ws):
        return jax.lax.scan(lambda c, w: (jnp.tanh(c @ w), None), x, ws)[0]

    pod_case("pod_scan_fsdp", scan_layers, [f32(32, 64), f32(4, 64, 64, scale=0.1)],
             [("data", None), (None, "model", None)])

    def block(x, wq, w1, w2):  # a residual MLP block on a 3-D mesh
        h = x + jnp.tanh(x @ wq)
        return h + jnp.tanh(h @ w1) @ w2

    pod_case("pod_block_3d", block, [f32(16, 64), f32(64, 64, scale=0.1), f32(64, 128, scale=0.1),
                                     f32(128, 64, scale=0.1)],
             [(("data", "fsdp"), None), ("fsdp", "tensor"), ("fsdp", "tensor"), ("tensor", "fsdp")],
             axes=("data", "fsdp", "tensor"), shape=(2, 2, 2))


def f32(*shape, scale=1.0):
    return (r.randn(*shape) * scale).astype(np.float32)


def main():
    case("gemm_bf16", lambda a, b: a @ b, [f32(128, 256).astype(jnp.bfloat16), f32(256, 128).astype(jnp.bfloat16)])
    case("gemm_f32_default", lambda a, b: jnp.tanh(a @ b), [f32(128, 256), f32(256, 128, scale=0.1)])
    conv = lambda x, w: jax.nn.relu(jax.lax.conv_general_dilated(x, w, (1, 1), "SAME",
                                                                  dimension_numbers=("NHWC", "HWIO", "NHWC")))
    case("conv", conv, [f32(2, 16, 16, 8), f32(3, 3, 8, 16, scale=0.2)])
    case("conv_grad", jax.grad(lambda x, w: jnp.sum(conv(x, w) ** 2), argnums=1), [f32(2, 16, 16, 8), f32(3, 3, 8, 16, scale=0.2)])

    def ln(x, g):
        m = x.mean(-1, keepdims=True)
        v = ((x - m) ** 2).mean(-1, keepdims=True)
        return (x - m) * jax.lax.rsqrt(v + 1e-5) * g

    case("layernorm", ln, [f32(128, 256), f32(256)])

    def adam(p, g, m, v):
        m = 0.9 * m + 0.1 * g
        v = 0.999 * v + 0.001 * g * g
        return p - 1e-3 * m / (jnp.sqrt(v) + 1e-8), m, v

    case("adam", adam, [f32(128, 256), f32(128, 256), f32(128, 256), np.abs(f32(128, 256))])
    case("softmax", lambda x: jax.nn.softmax(x, axis=-1), [f32(64, 500)])
    case("embed", lambda t, e: e[t], [r.randint(0, 500, size=(128,)).astype(np.int32), f32(500, 32)])
    case("scan_tanh", lambda x, w: jax.lax.scan(lambda c, wi: (jnp.tanh(c @ wi), None), x, w)[0],
         [f32(64, 128), f32(4, 128, 128, scale=0.1)])
    case("reduce_transpose", lambda x: (x.sum(0), x.T * 2, jnp.max(x, axis=1)), [f32(192, 128)])

    def mlp_step(w1, w2, x, y):
        def loss(a, b):
            return jnp.mean((jnp.tanh(x @ a) @ b - y) ** 2)
        g1, g2 = jax.grad(loss, argnums=(0, 1))(w1, w2)
        return w1 - 0.1 * g1, w2 - 0.1 * g2

    case("mlp_sgd_step", mlp_step, [f32(128, 256, scale=0.1), f32(256, 64, scale=0.1), f32(64, 128), f32(64, 64)])

    def attn(q, k, v):
        s = jnp.einsum("bhqd,bhkd->bhqk", q, k) / 8.0
        return jnp.einsum("bhqk,bhkd->bhqd", jax.nn.softmax(s, -1), v)

    bq = [f32(2, 2, 128, 64).astype(jnp.bfloat16) for _ in range(3)]
    case("attention_bf16", attn, bq)


if __name__ == "__main__":
    import sys
    if "--pod-only" not in sys.argv:
        main()
    pod_cases()
