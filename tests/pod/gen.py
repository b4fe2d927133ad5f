#!/usr/bin/env python3
"""gen.py: the pod fixture corpus — sharded JAX programs as XLA partitions them for CPU.

Each case in tests/pod/cases/NAME/ holds
    prog.hlo       JAX's lowered program (global shapes, sharding annotations, its mesh)
    opt.hlo        XLA's partitioned, optimized program (num_partitions=N, per-chip shapes)
    in0.npy ...    global inputs;  out0.npy ...  JAX's global results (bf16 as float32)
    shardings      the results' HLO shardings, one per line (XLA's text omits them)
    meta.json      mesh, devices, tolerance, the collectives in opt.hlo, jax version
and the results equal the unsharded function's (checked here before anything is written).

Run by hand (jax 0.10.2, numpy 2.4): python3 tests/pod/gen.py   (sets 8 host devices)"""
import json, os, re, shutil
os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=8"
os.environ.setdefault("JAX_PLATFORMS", "cpu")
import jax, jax.numpy as jnp, numpy as np
from jax.sharding import Mesh, PartitionSpec as P, NamedSharding as NS
from jax import shard_map

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "cases")
DEV = np.array(jax.devices())
M8 = Mesh(DEV.reshape(8), ("d",))
M24 = Mesh(DEV.reshape(2, 4), ("x", "y"))
M42 = Mesh(DEV.reshape(4, 2), ("x", "y"))
M4 = Mesh(DEV[:4].reshape(4), ("d",))
M2 = Mesh(DEV[:2].reshape(2), ("d",))
rng = np.random.RandomState(0)


def arr(*shape, dtype=np.float32, scale=1.0):
    if np.issubdtype(dtype, np.integer):
        return rng.randint(-20, 20, size=shape).astype(dtype)
    return (rng.randn(*shape) * scale).astype(dtype)


def case(name, f, args, in_specs, mesh, tol=1e-5, out_specs=None):
    shard = jax.tree.map(lambda s: NS(mesh, s), tuple(in_specs), is_leaf=lambda x: isinstance(x, P))
    kw = {"in_shardings": shard}
    if out_specs is not None:
        kw["out_shardings"] = jax.tree.map(lambda s: NS(mesh, s), out_specs, is_leaf=lambda x: isinstance(x, P))
    jf = jax.jit(f, **kw)
    lo = jf.lower(*args)
    c = lo.compile()
    outs = jax.tree.leaves(jf(*args))
    ref = jax.tree.leaves(jax.jit(f)(*args))  # unsharded
    for a, b in zip(outs, ref):
        np.testing.assert_allclose(np.asarray(a, np.float64), np.asarray(b, np.float64), rtol=tol * 10, atol=tol * 10)
    d = os.path.join(OUT, name)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    open(os.path.join(d, "prog.hlo"), "w").write(lo.as_text(dialect="hlo"))
    opt = c.as_text()
    open(os.path.join(d, "opt.hlo"), "w").write(opt)
    for i, a in enumerate(jax.tree.leaves(args)):  # entry parameters: the flattened leaves
        a = np.asarray(a)
        np.save(os.path.join(d, f"in{i}.npy"), a.astype(np.float32) if a.dtype.name == "bfloat16" else a)
    for i, o in enumerate(outs):
        o = np.asarray(o)
        if o.dtype.name == "bfloat16":
            o = o.astype(np.float32)
        np.save(os.path.join(d, f"out{i}.npy"), o)
    with open(os.path.join(d, "shardings"), "w") as fh:
        for s, o in zip(jax.tree.leaves(c.output_shardings), outs):
            fh.write(str(s._to_xla_hlo_sharding(np.ndim(o))) + "\n")
    colls = sorted(set(re.findall(r"\b(all-reduce|all-gather|reduce-scatter|all-to-all|collective-permute|"
                                  r"collective-broadcast)(?:-start)?\(", opt)))
    groups = sorted(set("mesh" if g.startswith("mesh") else "iota" if g.startswith("[") else "explicit"
                        for g in re.findall(r"replica_groups=(\S+)", opt)))
    json.dump({"mesh": dict(zip(mesh.axis_names, mesh.devices.shape)), "devices": int(mesh.devices.size),
               "rtol": tol, "atol": tol, "collectives": colls, "replica_group_forms": groups,
               "jax": jax.__version__}, open(os.path.join(d, "meta.json"), "w"), indent=1)
    print(f"{name}: {colls} {groups}")


def smap(f, mesh, i, o):
    return shard_map(f, mesh=mesh, in_specs=i, out_specs=o, check_vma=False)


def main():
    x64 = arr(16, 64)
    w = arr(64, 32, scale=0.2)
    case("psum_x", smap(lambda a: jax.lax.psum(a, "x"), M24, P("x", "y"), P(None, "y")), (arr(8, 16),), [P("x", "y")], M24)
    case("psum_xy", smap(lambda a: jax.lax.psum(a, ("x", "y")), M24, P("x", "y"), P()), (arr(8, 16),), [P("x", "y")], M24)
    case("pmean_d", smap(lambda a: jax.lax.pmean(a, "d"), M8, P("d"), P()), (arr(16, 4),), [P("d")], M8)
    case("pmax_d", smap(lambda a: jax.lax.pmax(a, "d"), M8, P("d"), P()), (arr(16, 4),), [P("d")], M8)
    case("psum_int", smap(lambda a: jax.lax.psum(a, "d"), M8, P("d"), P()), (arr(16, 4, dtype=np.int32),), [P("d")], M8, tol=0)
    case("psum_bf16", smap(lambda a: jax.lax.psum(a, "d"), M4, P("d"), P()),
         (jnp.asarray(arr(8, 8), jnp.bfloat16),), [P("d")], M4, tol=1e-2)
    case("all_gather_tiled", smap(lambda a: jax.lax.all_gather(a, "d", tiled=True), M8, P("d"), P()),
         (arr(16, 4),), [P("d")], M8)
    case("all_gather_stack", smap(lambda a: jax.lax.all_gather(a, "y"), M24, P("x", "y"), P("x")), (arr(4, 8),), [P("x", "y")], M24)
    case("psum_scatter", smap(lambda a: jax.lax.psum_scatter(a, "d", tiled=True), M8, P(), P("d")), (arr(16, 4),), [P()], M8)
    case("all_to_all", smap(lambda a: jax.lax.all_to_all(a, "d", 0, 1, tiled=True), M4, P(None, "d"), P("d", None)),
         (arr(8, 8),), [P(None, "d")], M4)
    case("ppermute_ring", smap(lambda a: jax.lax.ppermute(a, "d", [(i, (i + 1) % 8) for i in range(8)]), M8, P("d"), P("d")),
         (arr(16, 4),), [P("d")], M8)
    case("ppermute_shift", smap(lambda a: jax.lax.ppermute(a, "d", [(i, i + 1) for i in range(3)]), M4, P("d"), P("d")),
         (arr(8, 4),), [P("d")], M4)
    case("axis_index", smap(lambda a: a + jax.lax.axis_index("d").astype(a.dtype), M8, P("d"), P("d")), (arr(8, 2),), [P("d")], M8)
    case("sum_sharded", lambda a: jnp.sum(a, axis=0), (x64,), [P("x", "y")], M24)
    case("reshard", lambda a: a * 2, (arr(8, 8),), [P("x", None)], M24, out_specs=P(None, "y"))
    case("dp_matmul", lambda a, b: jnp.tanh(a @ b), (x64, w), [P(("x", "y"), None), P()], M24)
    case("megatron", lambda a, b1, b2: jnp.tanh(a @ b1) @ b2, (x64, arr(64, 128, scale=0.1), arr(128, 64, scale=0.1)),
         [P(), P(None, "y"), P("y", None)], M24)

    def loss(p, a, y):
        h = jax.nn.relu(a @ p[0])
        return jnp.mean((h @ p[1] - y) ** 2)

    def sgd(p, a, y):
        l, g = jax.value_and_grad(loss)(p, a, y)
        return l, [pi - 0.1 * gi for pi, gi in zip(p, g)]

    params = [arr(64, 32, scale=0.2), arr(32, 8, scale=0.2)]
    y = arr(16, 8)
    case("dp_sgd_step", sgd, (params, x64, y), [P(), P("d"), P("d")], M8, tol=1e-5)
    case("fsdp_step", sgd, (params, x64, y), [[P("d", None), P("d", None)], P("d"), P("d")], M8, tol=1e-5)
    case("dp_tp_step", sgd, (params, x64, y), [[P(None, "y"), P("y", None)], P("x"), P("x")], M24, tol=1e-5)
    case("fsdp_42", sgd, (params, x64, y), [[P("x", "y"), P("y", None)], P("x"), P("x")], M42, tol=1e-5)

    def attn(q, k, v):
        s = jnp.einsum("bqd,bkd->bqk", q, k) / 4.0
        return jnp.einsum("bqk,bkd->bqd", jax.nn.softmax(s, -1), v)

    qkv = [arr(4, 16, 8) for _ in range(3)]
    case("seq_attention", attn, tuple(qkv), [P(None, "d"), P(), P()], M4)

    def moe(xs, wexp):  # tokens split over experts' chips: all-to-all dispatch and return
        def body(t, we):
            t = jax.lax.all_to_all(t, "d", 0, 0, tiled=True)
            t = jnp.tanh(t @ we[0])
            return jax.lax.all_to_all(t, "d", 0, 0, tiled=True)
        return smap(body, M4, (P("d"), P("d")), P("d"))(xs, wexp)

    case("moe_all_to_all", moe, (arr(16, 8), arr(4, 8, 8, scale=0.3)), [P("d"), P("d")], M4)
    case("data_2", lambda a, b: (a @ b).sum(0), (arr(8, 16), arr(16, 4)), [P("d"), P()], M2)

    def scan_dp(a, ws):
        return jax.lax.scan(lambda c, wi: (jnp.tanh(c @ wi), None), a, ws)[0]

    case("scan_dp", scan_dp, (arr(16, 32), arr(3, 32, 32, scale=0.2)), [P("d"), P()], M8)
    # pmap: replica_count devices (jax.pmap lowers to a shard_map program in this jax)
    pm = jax.pmap(lambda a: (jax.lax.psum(a, "i"), jax.lax.all_gather(a, "i").sum(0)), axis_name="i")
    xp = arr(8, 4)
    d = os.path.join(OUT, "pmap_psum")
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    c = pm.lower(xp).compile()
    open(os.path.join(d, "opt.hlo"), "w").write(c.as_text())
    np.save(os.path.join(d, "in0.npy"), xp)
    for i, o in enumerate(pm(xp)):
        np.save(os.path.join(d, f"out{i}.npy"), np.asarray(o))
    open(os.path.join(d, "shardings"), "w").write("{devices=[8,1]<=[8]}\n{devices=[8,1]<=[8]}\n")
    json.dump({"mesh": {"i": 8}, "devices": 8, "rtol": 1e-5, "atol": 1e-5, "collectives": ["all-gather", "all-reduce"],
               "pmap": True, "jax": jax.__version__}, open(os.path.join(d, "meta.json"), "w"), indent=1)
    print("pmap_psum")


if __name__ == "__main__":
    main()
