#!/usr/bin/env python3
"""gen_corpus.py: the held-out-style SPMD corpus — sharded JAX programs written as users write
them (jax.sharding NamedSharding and with_sharding_constraint, shard_map, flax-style logical
axis rules), in families, on meshes of 8 to 256 devices of v4 / v5e / v5p / v6e, each compiled
by the XLA TPU compiler (libtpu, compile-only: no TPU needed).

    python3 bench/spmd/gen_corpus.py --keep --deadline 07:00   # resumable; stop starting cases then (UTC)
    python3 bench/spmd/gen_corpus.py --list                    # names, families and splits
    python3 bench/spmd/gen_corpus.py --only grad_accum         # a subset (substring of the name)

Writes bench/spmd/corpus/NAME/ (kept lean):
  prog.hlo        JAX's lowered program with its shardings (tpusim's input)
  tpu_part.hlo.gz the TPU compiler's program right after its SPMD partitioner
  tpu.hlo.gz      the TPU compiler's final program (fusions, layouts, estimated_cycles)
  meta.json       chip, topology, devices, mesh, family, split, result shardings, the
                  compiler's collectives (final and partitioned) and its figures
Split: "test" when int(sha1(NAME)[:8], 16) % 10 < 3, else "tune" (as bench/fidelity). Cases
the compiler refuses or that fail go to corpus/_failed.txt. Run it under `nice`: one compile
takes 10-60 s on two shared cores. Nothing in the tests runs this script."""
import argparse, gzip, glob, hashlib, json, os, re, shutil, sys, tempfile, time, traceback
os.environ.setdefault("TPU_ACCELERATOR_TYPE", "v5litepod-8")
os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "corpus")
COLL = r" (all-reduce|all-gather|reduce-scatter|all-to-all|collective-permute|collective-broadcast)(?:-start)?\("


def split_of(name):
    return "test" if int(hashlib.sha1(name.encode()).hexdigest()[:8], 16) % 10 < 3 else "tune"


CASES = []  # (name, family, builder) — builder() -> (f, args, in_specs, out_specs, topology, shape, axes)


def case(name, family, builder):
    CASES.append((name, family, builder))


def define():
    import numpy as np
    import jax, jax.numpy as jnp
    from jax.sharding import PartitionSpec as P
    from jax.experimental.shard_map import shard_map as _smap
    BF, F32, I32 = jnp.bfloat16, jnp.float32, jnp.int32

    def smap(f, mesh_axes, in_specs, out_specs):
        # shard_map needs the mesh at trace time: resolved in run() through jax.sharding's
        # abstract mesh (jax.set_mesh)
        return lambda *a: _smap(f, mesh=jax.sharding.get_abstract_mesh(), in_specs=in_specs,
                                out_specs=out_specs, check_rep=False)(*a)

    def wsc(x, *spec):
        return jax.lax.with_sharding_constraint(x, P(*spec))

    def rms(x, g):
        x32 = x.astype(F32)
        return (x32 * jax.lax.rsqrt((x32 * x32).mean(-1, keepdims=True) + 1e-6) * g).astype(x.dtype)

    def mlp(x, w1, w2):
        return jax.nn.gelu(x @ w1) @ w2

    def sgd(fn, nparams):
        def step(*a):
            ps, data = a[:nparams], a[nparams:]
            loss = lambda ps: jnp.mean(jnp.square(fn(*data[:1], *ps).astype(F32)))
            g = jax.grad(loss)(ps)
            return tuple(p - (1e-3 * d).astype(p.dtype) for p, d in zip(ps, g))
        return step

    TOPO = {  # topology -> (mesh shape of all devices as a flat count)
        "v5e:2x4": 8, "v5e:4x4": 16, "v5e:4x8": 32, "v5e:8x8": 64, "v5e:8x16": 128, "v5e:16x16": 256,
        "v6e:2x4": 8, "v6e:4x4": 16, "v6e:8x8": 64, "v6e:16x16": 256,
        "v5p:2x2x2": 8, "v5p:2x2x4": 16, "v5p:2x4x4": 32, "v5p:4x4x4": 64, "v5p:4x4x8": 128,
        "v4:2x2x1": 8, "v4:2x2x2": 16, "v4:2x2x4": 32, "v4:2x4x4": 64,
    }

    # 1. Megatron MLP with sequence-parallel norms (activations split along the sequence
    #    between blocks, gathered for the tensor-parallel MLP, reduce-scattered after it)
    def megatron_sp(train):
        def fwd(x, g, w1, w2):
            h = wsc(rms(x, g), "data", None, None)
            y = mlp(h, w1, w2)
            return wsc(x + y, "data", "model", None)
        if not train:
            return fwd
        def step(g, w1, w2, x):
            loss = lambda p: jnp.mean(jnp.square(fwd(x, *p).astype(F32)))
            gr = jax.grad(loss)((g, w1, w2))
            return tuple(p - (1e-3 * d).astype(p.dtype) for p, d in zip((g, w1, w2), gr))
        return step
    for topo, shape, (b, s, d, f), train in [
            ("v5e:2x4", (2, 4), (8, 1024, 2048, 8192), False), ("v5e:4x4", (4, 4), (8, 2048, 2048, 8192), True),
            ("v6e:4x4", (2, 8), (4, 2048, 4096, 16384), False), ("v5p:2x2x2", (2, 4), (8, 1024, 2048, 8192), True),
            ("v4:2x2x1", (2, 4), (8, 1024, 1024, 4096), True), ("v5e:8x8", (8, 8), (16, 2048, 4096, 16384), False),
            ("v6e:8x8", (4, 16), (16, 4096, 2048, 8192), True)]:
        nm = f"megatron_sp_{'step' if train else 'fwd'}_{topo.replace(':', '_')}_d{d}"
        def bld(topo=topo, shape=shape, b=b, s=s, d=d, f=f, train=train):
            xs, gs, w1s, w2s = ((b, s, d), BF), ((d,), F32), ((d, f), BF), ((f, d), BF)
            sp = [("data", "model", None), (None,), (None, "model"), ("model", None)]
            if train:
                return (megatron_sp(True), [gs, w1s, w2s, xs], sp[1:] + sp[:1], sp[1:], topo, shape, ("data", "model"))
            return (megatron_sp(False), [xs, gs, w1s, w2s], sp, [sp[0]], topo, shape, ("data", "model"))
        case(nm, "megatron_sp", bld)

    # 2. FSDP over a scan of layers (weights stacked [L, d, d], split along a weight dimension)
    def scan_mlp(x, w1s, w2s):
        def body(c, w):
            return c + mlp(c, w[0], w[1]), None
        return jax.lax.scan(body, x, (w1s, w2s))[0]
    for topo, n, (L, bt, d, f), wdim in [
            ("v5e:2x4", 8, (4, 8192, 2048, 8192), 1), ("v5e:4x4", 16, (8, 16384, 2048, 8192), 1),
            ("v5e:4x4", 16, (4, 16384, 4096, 4096), 2), ("v5p:2x2x4", 16, (6, 16384, 2048, 8192), 1),
            ("v5p:4x4x4", 64, (4, 65536, 4096, 16384), 1), ("v6e:4x4", 16, (8, 16384, 2048, 8192), 1),
            ("v4:2x2x2", 16, (4, 16384, 2048, 8192), 1), ("v5e:8x8", 64, (4, 65536, 2048, 8192), 1),
            ("v5e:4x8", 32, (4, 32768, 2048, 8192), 1), ("v6e:16x16", 256, (4, 262144, 2048, 8192), 1)]:
        nm = f"fsdp_scan_{topo.replace(':', '_')}_L{L}_d{d}_w{wdim}"
        def bld(topo=topo, n=n, L=L, bt=bt, d=d, f=f, wdim=wdim):
            ws = (None, "fsdp", None) if wdim == 1 else (None, None, "fsdp")
            w2 = (None, None, "fsdp") if wdim == 1 else (None, "fsdp", None)
            return (sgd(scan_mlp, 2), [((L, d, f), BF), ((L, f, d), BF), ((bt, d), BF)],
                    [ws, w2, ("fsdp", None)], [ws, w2], topo, (n,), ("fsdp",))
        case(nm, "fsdp_scan", bld)
    for topo, shape, (L, bt, d) in [("v5e:4x4", (2, 8), (6, 16384, 2048)), ("v5p:2x2x2", (2, 4), (4, 8192, 2048)),
                                   ("v6e:8x8", (8, 8), (4, 65536, 2048))]:
        nm = f"fsdp_dp_scan_{topo.replace(':', '_')}_L{L}"
        def bld(topo=topo, shape=shape, L=L, bt=bt, d=d):
            f = lambda x, ws: jax.lax.scan(lambda c, w: (jnp.tanh(c @ w), None), x, ws)[0]
            return (sgd(f, 1), [((L, d, d), BF), ((bt, d), BF)], [(None, "fsdp", None), (("data", "fsdp"), None)],
                    [(None, "fsdp", None)], topo, shape, ("data", "fsdp"))
        case(nm, "fsdp_scan", bld)

    # 3. grouped-query attention with heads split over the model axis
    def gqa(x, wq, wk, wv, wo):
        b, s, _ = x.shape
        hq, hk = wq.shape[1], wk.shape[1]
        q = jnp.einsum("bsd,dhk->bshk", x, wq).reshape(b, s, hk, hq // hk, -1)
        k = jnp.einsum("bsd,dhk->bshk", x, wk)
        v = jnp.einsum("bsd,dhk->bshk", x, wv)
        sc = jnp.einsum("bsgrk,btgk->bgrst", q, k).astype(F32) / 11.3
        mask = jnp.tril(jnp.ones((s, s), bool))
        p = jax.nn.softmax(jnp.where(mask, sc, -1e9), -1).astype(BF)
        o = jnp.einsum("bgrst,btgk->bsgrk", p, v).reshape(b, s, hq, -1)
        return jnp.einsum("bshk,hkd->bsd", o, wo)
    for topo, shape, (b, s, d, hq, hk, dh), train in [
            ("v5e:2x4", (2, 4), (8, 1024, 2048, 16, 8, 128), False), ("v5e:4x4", (2, 8), (8, 2048, 4096, 32, 8, 128), False),
            ("v6e:2x4", (1, 8), (4, 2048, 4096, 32, 8, 128), True), ("v5p:2x2x2", (2, 4), (8, 1024, 2048, 16, 4, 128), True),
            ("v4:2x2x2", (4, 4), (8, 1024, 2048, 16, 4, 128), False), ("v6e:8x8", (8, 8), (32, 2048, 4096, 64, 8, 64), False)]:
        nm = f"gqa_tp_{'step' if train else 'fwd'}_{topo.replace(':', '_')}_h{hq}k{hk}"
        def bld(topo=topo, shape=shape, b=b, s=s, d=d, hq=hq, hk=hk, dh=dh, train=train):
            ws = [((d, hq, dh), BF), ((d, hk, dh), BF), ((d, hk, dh), BF), ((hq, dh, d), BF)]
            sp = [(None, "model", None)] * 3 + [("model", None, None)]
            xs, xsp = ((b, s, d), BF), ("data", None, None)
            if train:
                return (sgd(gqa, 4), ws + [xs], sp + [xsp], sp, topo, shape, ("data", "model"))
            return (gqa, [xs] + ws, [xsp] + sp, [xsp], topo, shape, ("data", "model"))
        case(nm, "gqa_tp", bld)

    # 4. MoE through shard_map: tokens to their experts' chips by all_to_all
    def moe_smap(e_per, cap):
        def body(x, wr, w1, w2):  # per chip: x [t, d], w1 [e_per, d, f], w2 [e_per, f, d]
            n = jax.lax.psum(1, "ep")
            t, d = x.shape
            ne = n * e_per
            gate = jax.nn.softmax((x @ wr).astype(F32), -1)
            top = jnp.argmax(gate, -1)
            oh = jax.nn.one_hot(top, ne, dtype=BF)                           # [t, E]
            pos = ((jnp.cumsum(oh, 0) - 1) * oh).sum(-1).astype(I32)
            slot = jax.nn.one_hot(pos, cap, dtype=BF)[:, None, :] * oh[..., None]  # [t, E, C]
            xe = jnp.einsum("tec,td->ecd", slot, x).reshape(n, e_per, cap, d)
            xe = jax.lax.all_to_all(xe, "ep", 0, 0, tiled=False)              # [n(src), e_per, C, d]
            h = jax.nn.gelu(jnp.einsum("secd,edf->secf", xe, w1))
            ye = jnp.einsum("secf,efd->secd", h, w2)
            ye = jax.lax.all_to_all(ye, "ep", 0, 0, tiled=False).reshape(ne, cap, d)
            return jnp.einsum("tec,ecd->td", slot, ye) * gate.max(-1, keepdims=True).astype(BF)
        return body
    for topo, n, (t, d, f, e_per, cap) in [
            ("v5e:2x4", 8, (4096, 2048, 4096, 1, 1024)), ("v5e:4x4", 16, (4096, 2048, 8192, 1, 512)),
            ("v5p:2x2x2", 8, (8192, 4096, 8192, 2, 1024)), ("v6e:4x4", 16, (8192, 2048, 4096, 2, 512)),
            ("v4:2x2x1", 8, (4096, 1024, 4096, 1, 1024)), ("v5p:4x4x4", 64, (16384, 2048, 4096, 1, 512))]:
        nm = f"moe_smap_{topo.replace(':', '_')}_e{n * e_per}"
        def bld(topo=topo, n=n, t=t, d=d, f=f, e_per=e_per, cap=cap):
            body = moe_smap(e_per, cap)
            fn = smap(body, ("ep",), (P("ep", None), P(None, None), P("ep", None, None), P("ep", None, None)), P("ep", None))
            return (fn, [((t, d), BF), ((d, n * e_per), BF), ((n * e_per, d, f), BF), ((n * e_per, f, d), BF)],
                    [("ep", None), (None, None), ("ep", None, None), ("ep", None, None)], [("ep", None)], topo, (n,), ("ep",))
        case(nm, "moe_smap", bld)

    # 5. ring attention through shard_map: K/V blocks passed round the ring by ppermute
    def ring_attn(n):
        def body(q, k, v):  # [b, s/n, h, k] each
            perm = [(i, (i + 1) % n) for i in range(n)]
            def step(i, c):
                k, v, o, m, l = c
                s = jnp.einsum("bqhk,bshk->bhqs", q, k).astype(F32) / 11.3
                mn = jnp.maximum(m, s.max(-1))
                p = jnp.exp(s - mn[..., None])
                sc = jnp.exp(m - mn)
                l = l * sc + p.sum(-1)
                o = o * sc.transpose(0, 2, 1)[..., None] + jnp.einsum("bhqs,bshk->bqhk", p.astype(BF), v).astype(F32)
                k = jax.lax.ppermute(k, "sp", perm)
                v = jax.lax.ppermute(v, "sp", perm)
                return k, v, o, mn, l
            b, sq, h, dk = q.shape
            o = jnp.zeros((b, sq, h, dk), F32)
            m = jnp.full((b, h, sq), -1e30, F32)
            l = jnp.zeros((b, h, sq), F32)
            _, _, o, m, l = jax.lax.fori_loop(0, n, step, (k, v, o, m, l))
            return (o / l.transpose(0, 2, 1)[..., None]).astype(BF)
        return body
    for topo, n, (b, s, h, dk) in [("v5e:2x4", 8, (2, 16384, 16, 128)), ("v5e:4x4", 16, (1, 32768, 16, 128)),
                                   ("v5p:2x2x2", 8, (4, 8192, 32, 128)), ("v6e:4x4", 16, (2, 16384, 8, 128)),
                                   ("v4:2x2x1", 8, (2, 8192, 16, 64))]:
        nm = f"ring_attn_{topo.replace(':', '_')}_s{s}"
        def bld(topo=topo, n=n, b=b, s=s, h=h, dk=dk):
            sp = P(None, "sp", None, None)
            fn = smap(ring_attn(n), ("sp",), (sp, sp, sp), sp)
            return (fn, [((b, s, h, dk), BF)] * 3, [(None, "sp", None, None)] * 3, [(None, "sp", None, None)],
                    topo, (n,), ("sp",))
        case(nm, "ring_attn", bld)

    # 6. 2-D (SUMMA-style) matmuls: both operands and the result split over a 2-D mesh
    for topo, shape, (m_, k_, n_), specs in [
            ("v5e:4x4", (4, 4), (8192, 8192, 8192), (("x", "y"), ("x", "y"), ("x", "y"))),
            ("v5e:2x4", (2, 4), (8192, 4096, 8192), (("x", "y"), ("y", "x"), ("x", "y"))),
            ("v6e:4x4", (4, 4), (16384, 8192, 8192), (("x", "y"), ("x", "y"), ("x", "y"))),
            ("v5p:2x2x4", (4, 4), (8192, 16384, 8192), (("x", "y"), ("y", None), ("x", None))),
            ("v4:2x2x2", (4, 4), (8192, 8192, 4096), (("x", "y"), ("x", "y"), ("x", "y"))),
            ("v5e:8x8", (8, 8), (16384, 16384, 16384), (("x", "y"), ("x", "y"), ("x", "y"))),
            ("v6e:16x16", (16, 16), (32768, 16384, 32768), (("x", "y"), ("x", "y"), ("x", "y")))]:
        nm = f"summa_{topo.replace(':', '_')}_{m_}x{k_}x{n_}_{''.join(c or '_' for c in specs[1])}"
        def bld(topo=topo, shape=shape, m_=m_, k_=k_, n_=n_, specs=specs):
            fn = lambda a, b: wsc(a @ b, *specs[2])
            return (fn, [((m_, k_), BF), ((k_, n_), BF)], list(specs[:2]), [specs[2]], topo, shape, ("x", "y"))
        case(nm, "summa", bld)
    for topo, shape, mk in [("v5e:4x4", (4, 4), 8192), ("v5p:2x2x4", (4, 4), 8192), ("v6e:8x8", (8, 8), 16384)]:
        nm = f"summa_smap_{topo.replace(':', '_')}_{mk}"
        def bld(topo=topo, shape=shape, mk=mk):
            def body(a, b):  # blocks [m/x, k/y], [k/x, n/y]: gather a along y, b along x
                ag = jax.lax.all_gather(a, "y", axis=1, tiled=True)
                bg = jax.lax.all_gather(b, "x", axis=0, tiled=True)
                return ag @ bg
            sp = P("x", "y")
            fn = smap(body, ("x", "y"), (sp, sp), sp)
            return (fn, [((mk, mk), BF)] * 2, [("x", "y")] * 2, [("x", "y")], topo, shape, ("x", "y"))
        case(nm, "summa", bld)

    # 7. vocabulary-split embeddings and tied heads
    for topo, shape, (b, s, v, d), kind in [
            ("v5e:2x4", (2, 4), (8, 2048, 32768, 2048), "lookup"), ("v5e:4x4", (4, 4), (16, 2048, 65536, 4096), "lookup"),
            ("v6e:4x4", (2, 8), (8, 2048, 131072, 2048), "tied"), ("v5p:2x2x2", (2, 4), (8, 1024, 32768, 4096), "tied"),
            ("v4:2x2x1", (2, 4), (8, 1024, 32768, 1024), "lookup"), ("v6e:8x8", (8, 8), (64, 1024, 65536, 2048), "tied"),
            ("v5e:4x4", (2, 8), (8, 2048, 50304, 2048), "step")]:
        nm = f"embed_{kind}_{topo.replace(':', '_')}_v{v}"
        def bld(topo=topo, shape=shape, b=b, s=s, v=v, d=d, kind=kind):
            if kind == "lookup":
                return (lambda t, e: e[t] * 2, [((b, s), I32), ((v, d), BF)], [("data", None), ("model", None)],
                        [("data", None, None)], topo, shape, ("data", "model"))
            if kind == "tied":
                def fn(t, e):
                    h = e[t]
                    h = rms(h, 1.0)
                    lg = jnp.einsum("bsd,vd->bsv", h, e).astype(F32)
                    return jax.nn.logsumexp(lg, -1)
                return (fn, [((b, s), I32), ((v, d), BF)], [("data", None), ("model", None)], [("data", None)],
                        topo, shape, ("data", "model"))
            def step(e, t):
                def loss(e):
                    h = e[t]
                    lg = jnp.einsum("bsd,vd->bsv", h, e).astype(F32)
                    return jnp.mean(jax.nn.logsumexp(lg, -1) - jnp.take_along_axis(lg, t[..., None], -1)[..., 0])
                return e - 1e-3 * jax.grad(loss)(e).astype(BF)
            return (step, [((v, d), BF), ((b, s), I32)], [("model", None), ("data", None)], [("model", None)],
                    topo, shape, ("data", "model"))
        case(nm, "embed_vocab", bld)

    # 8. spatially split convolutions (images split along height; halo exchange)
    def conv(x, w, stride=1):
        return jax.lax.conv_general_dilated(x, w, (stride, stride), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"))
    for topo, shape, (b, hw, c, k), train in [
            ("v5e:2x4", (2, 4), (8, 256, 128, 3), False), ("v5e:4x4", (2, 8), (4, 512, 64, 3), False),
            ("v6e:2x4", (1, 8), (2, 512, 128, 5), False), ("v5p:2x2x2", (2, 4), (8, 256, 256, 3), True),
            ("v4:2x2x1", (2, 4), (4, 256, 128, 3), True), ("v5e:4x4", (4, 4), (16, 256, 128, 3), True)]:
        nm = f"conv_spatial_{'step' if train else 'fwd'}_{topo.replace(':', '_')}_{hw}_c{c}_k{k}"
        def bld(topo=topo, shape=shape, b=b, hw=hw, c=c, k=k, train=train):
            f2 = lambda x, w1, w2: jax.nn.relu(conv(jax.nn.relu(conv(x, w1)), w2))
            xs, xsp = ((b, hw, hw, c), BF), ("data", "space", None, None)
            ws = [((k, k, c, c), BF)] * 2
            if train:
                return (sgd(f2, 2), ws + [xs], [(None,) * 4] * 2 + [xsp], [(None,) * 4] * 2, topo, shape, ("data", "space"))
            return (f2, [xs] + ws, [xsp] + [(None,) * 4] * 2, [xsp], topo, shape, ("data", "space"))
        case(nm, "conv_spatial", bld)

    # 9. gradient accumulation under data parallelism (a loop over microbatches)
    def accum(fn, nparams, micro, use_scan):
        def step(*a):
            ps, x = a[:nparams], a[nparams]
            # microbatches: given as [micro, batch, ...] or cut from the batch here
            xs = x if x.shape[0] == micro else x.reshape(micro, x.shape[0] // micro, *x.shape[1:])
            loss = lambda ps, xb: jnp.mean(jnp.square(fn(xb, *ps).astype(F32)))
            zero = tuple(jnp.zeros(p.shape, F32) for p in ps)
            if use_scan:
                def body(acc, xb):
                    g = jax.grad(loss)(ps, xb)
                    return tuple(s + d.astype(F32) for s, d in zip(acc, g)), None
                acc = jax.lax.scan(body, zero, xs)[0]
            else:
                def body(i, acc):
                    g = jax.grad(loss)(ps, xs[i])
                    return tuple(s + d.astype(F32) for s, d in zip(acc, g))
                acc = jax.lax.fori_loop(0, micro, body, zero)
            return tuple(p - (1e-3 / micro * d).astype(p.dtype) for p, d in zip(ps, acc))
        return step
    for topo, n, (bt, d, f, micro), use_scan, dt in [
            ("v5e:2x4", 8, (8192, 2048, 8192, 4), True, BF), ("v5e:4x4", 16, (16384, 2048, 8192, 8), False, BF),
            ("v6e:4x4", 16, (16384, 4096, 8192, 4), True, BF), ("v5p:2x2x2", 8, (8192, 2048, 8192, 4), False, F32),
            ("v4:2x2x1", 8, (4096, 1024, 4096, 4), True, BF), ("v5e:8x8", 64, (65536, 2048, 8192, 4), True, BF),
            ("v5p:4x4x4", 64, (65536, 2048, 8192, 2), False, BF), ("v6e:16x16", 256, (262144, 1024, 4096, 4), True, BF)]:
        nm = f"grad_accum_{'scan' if use_scan else 'fori'}_{topo.replace(':', '_')}_m{micro}_{'f32' if dt == F32 else 'bf16'}"
        def bld(topo=topo, n=n, bt=bt, d=d, f=f, micro=micro, use_scan=use_scan, dt=dt):
            return (accum(mlp, 2, micro, use_scan), [((d, f), dt), ((f, d), dt), ((bt, d), dt)],
                    [(None, None), (None, None), ("data", None)], [(None, None), (None, None)],
                    topo, (n,), ("data",))
        case(nm, "grad_accum", bld)
    for topo, n, (bt, d, f, micro), use_scan in [
            ("v5e:2x4", 8, (8192, 2048, 8192, 4), True), ("v5e:4x4", 16, (16384, 2048, 8192, 4), False),
            ("v6e:4x4", 16, (16384, 2048, 8192, 8), True), ("v5p:2x2x2", 8, (8192, 4096, 8192, 2), True),
            ("v4:2x2x2", 16, (8192, 2048, 8192, 4), False), ("v5p:4x4x4", 64, (65536, 2048, 8192, 4), True),
            ("v6e:8x8", 64, (65536, 2048, 8192, 2), False)]:
        nm = f"grad_accum_mb_{'scan' if use_scan else 'fori'}_{topo.replace(':', '_')}_m{micro}"
        def bld(topo=topo, n=n, bt=bt, d=d, f=f, micro=micro, use_scan=use_scan):
            return (accum(mlp, 2, micro, use_scan), [((d, f), BF), ((f, d), BF), ((micro, bt // micro, d), BF)],
                    [(None, None), (None, None), (None, "data", None)], [(None, None), (None, None)],
                    topo, (n,), ("data",))
        case(nm, "grad_accum", bld)
    for topo, shape, micro in [("v5e:4x4", (4, 4), 4), ("v5p:2x2x2", (2, 4), 2)]:
        nm = f"grad_accum_tp_{topo.replace(':', '_')}_m{micro}"
        def bld(topo=topo, shape=shape, micro=micro):
            return (accum(mlp, 2, micro, True), [((2048, 8192), BF), ((8192, 2048), BF), ((8192, 2048), BF)],
                    [(None, "model"), ("model", None), ("data", None)], [(None, "model"), ("model", None)],
                    topo, shape, ("data", "model"))
        case(nm, "grad_accum", bld)

    # 10. ZeRO-1: replicated weights, optimizer state (Adam moments) split over data
    def zero1(x, w1, w2, m1, m2, v1, v2):
        loss = lambda p: jnp.mean(jnp.square(mlp(x, *p).astype(F32)))
        g = jax.grad(loss)((w1, w2))
        outs = []
        for w, gd, m, v in zip((w1, w2), g, (m1, m2), (v1, v2)):
            gd = wsc(gd.astype(F32), "data", None)
            m = 0.9 * m + 0.1 * gd
            v = 0.999 * v + 0.001 * gd * gd
            upd = wsc(m / (jnp.sqrt(v) + 1e-8), "data", None)
            nw = wsc((w.astype(F32) - 1e-3 * upd).astype(w.dtype), None, None)
            outs += [nw, m, v]
        return tuple(outs)
    for topo, n, (bt, d, f) in [("v5e:2x4", 8, (8192, 2048, 8192)), ("v5e:4x4", 16, (16384, 2048, 8192)),
                                ("v6e:4x4", 16, (8192, 4096, 8192)), ("v5p:2x2x2", 8, (8192, 2048, 4096)),
                                ("v4:2x2x2", 16, (8192, 2048, 4096)), ("v5e:8x8", 64, (65536, 1024, 4096))]:
        nm = f"zero1_{topo.replace(':', '_')}_d{d}"
        def bld(topo=topo, n=n, bt=bt, d=d, f=f):
            args = [((bt, d), BF), ((d, f), BF), ((f, d), BF), ((d, f), F32), ((f, d), F32), ((d, f), F32), ((f, d), F32)]
            sp = [("data", None), (None, None), (None, None)] + [("data", None)] * 4
            outs = [(None, None), ("data", None), ("data", None)] * 2
            return (zero1, args, sp, outs, topo, (n,), ("data",))
        case(nm, "zero1", bld)

    # 11. resharding outputs: the result wanted in another split than it is computed in
    for topo, shape, (r, c), src, dst in [
            ("v5e:2x4", (8,), (8192, 4096), ("a", None), (None, "a")),
            ("v5e:4x4", (4, 4), (8192, 8192), ("a", "b"), ("b", "a")),
            ("v6e:4x4", (4, 4), (16384, 4096), (("a", "b"), None), (None, ("a", "b"))),
            ("v5p:2x2x2", (2, 4), (8192, 8192), ("a", "b"), ("a", None)),
            ("v4:2x2x1", (2, 4), (4096, 4096), (None, "b"), ("b", None)),
            ("v5e:8x8", (8, 8), (16384, 16384), ("a", "b"), (None, ("a", "b"))),
            ("v6e:2x4", (2, 4), (4096, 8192), ("a", None), ("b", "a"))]:
        def tag(sp):
            return "".join("_" if s is None else "".join(s) if isinstance(s, tuple) else s for s in sp)
        nm = f"reshard_{topo.replace(':', '_')}_{tag(src)}_to_{tag(dst)}"
        def bld(topo=topo, shape=shape, r=r, c=c, src=src, dst=dst):
            axes = ("a", "b")[:len(shape)]
            return (lambda x: jnp.tanh(x) * 2, [((r, c), BF)], [src], [dst], topo, shape, axes)
        case(nm, "reshard", bld)

    # 12. 3-axis meshes (data, fsdp, tensor): a transformer MLP block step
    def block_mlp(x, g, w1, w2):
        return x + mlp(rms(x, g), w1, w2)
    for topo, shape, (b, s, d, f) in [
            ("v5e:4x8", (2, 4, 4), (16, 1024, 2048, 8192)), ("v5p:4x4x4", (4, 4, 4), (32, 1024, 4096, 16384)),
            ("v6e:8x8", (4, 4, 4), (32, 1024, 4096, 16384)), ("v5e:16x16", (8, 8, 4), (64, 1024, 4096, 16384)),
            ("v4:2x4x4", (4, 4, 4), (32, 1024, 2048, 8192)), ("v5p:4x4x8", (8, 4, 4), (64, 1024, 4096, 16384)),
            ("v6e:16x16", (16, 4, 4), (64, 2048, 4096, 16384)), ("v5e:2x4", (2, 2, 2), (8, 1024, 2048, 8192))]:
        nm = f"mesh3d_{topo.replace(':', '_')}_{'x'.join(map(str, shape))}_d{d}"
        def bld(topo=topo, shape=shape, b=b, s=s, d=d, f=f):
            sp = [(None,), ("fsdp", "tensor"), ("tensor", "fsdp")]
            return (sgd(block_mlp, 3), [((d,), F32), ((d, f), BF), ((f, d), BF), ((b, s, d), BF)],
                    sp + [(("data", "fsdp"), None, None)], sp, topo, shape, ("data", "fsdp", "tensor"))
        case(nm, "mesh3d", bld)

    # 13. flax-style logical partitioning: logical axis names mapped to mesh axes by rules
    RULES = {"batch": ("data", "fsdp"), "embed": "fsdp", "mlp": "tensor", "heads": "tensor", "kv": None, "seq": None,
             "vocab": "tensor"}
    def lspec(*names):
        return tuple(RULES.get(n) for n in names)
    def flax_layer(x, wq, wo, w1, w2):
        x = wsc(x, *lspec("batch", "seq", "embed")[:1], None, None)
        q = jnp.einsum("bsd,dhk->bshk", x, wq)
        q = wsc(q, *lspec("batch", "seq", "heads", "kv"))
        a = jax.nn.softmax(jnp.einsum("bshk,bthk->bhst", q, q).astype(F32) / 11.3, -1).astype(BF)
        o = jnp.einsum("bhst,bthk->bshk", a, q)
        h = x + jnp.einsum("bshk,hkd->bsd", o, wo)
        h = wsc(h, *lspec("batch", "seq")[:1], None, None)
        m = wsc(jax.nn.gelu(h @ w1), *lspec("batch", "seq", "mlp"))
        return h + m @ w2
    for topo, shape, (b, s, d, hh, f), train in [
            ("v5e:4x4", (2, 2, 4), (16, 1024, 2048, 16, 8192), False), ("v5p:2x2x4", (1, 4, 4), (16, 1024, 2048, 16, 8192), True),
            ("v6e:4x4", (2, 2, 4), (16, 1024, 2048, 16, 8192), True), ("v5e:8x8", (4, 4, 4), (64, 1024, 4096, 32, 16384), False),
            ("v4:2x2x2", (2, 2, 4), (16, 1024, 2048, 16, 8192), False)]:
        nm = f"flax_logical_{'step' if train else 'fwd'}_{topo.replace(':', '_')}_d{d}"
        def bld(topo=topo, shape=shape, b=b, s=s, d=d, hh=hh, f=f, train=train):
            ws = [((d, hh, 128), BF), ((hh, 128, d), BF), ((d, f), BF), ((f, d), BF)]
            sp = [lspec("embed", "heads", "kv"), lspec("heads", "kv", "embed"), lspec("embed", "mlp"), lspec("mlp", "embed")]
            xs, xsp = ((b, s, d), BF), (RULES["batch"], None, None)
            if train:
                return (sgd(flax_layer, 4), ws + [xs], sp + [xsp], sp, topo, shape, ("data", "fsdp", "tensor"))
            return (flax_layer, [xs] + ws, [xsp] + sp, [xsp], topo, shape, ("data", "fsdp", "tensor"))
        case(nm, "flax_logical", bld)

    # 14. data parallelism on large slices (one gradient all-reduce over every device)
    for topo, n, (bt, d, f) in [("v5e:8x8", 64, (65536, 2048, 8192)), ("v5e:16x16", 256, (131072, 2048, 8192)),
                                ("v5p:4x4x8", 128, (65536, 4096, 16384)), ("v6e:16x16", 256, (262144, 2048, 8192)),
                                ("v4:2x4x4", 64, (32768, 2048, 8192))]:
        nm = f"dp_mlp_{topo.replace(':', '_')}_d{d}"
        def bld(topo=topo, n=n, bt=bt, d=d, f=f):
            return (sgd(mlp, 2), [((d, f), BF), ((f, d), BF), ((bt, d), BF)], [(None, None), (None, None), ("data", None)],
                    [(None, None), (None, None)], topo, (n,), ("data",))
        case(nm, "dp_large", bld)

    # 15. FSDP of an MLP step (no loop) on various slices: gathers or windowed einsums
    for topo, n, (bt, d, f) in [("v5e:2x4", 8, (8192, 4096, 16384)), ("v5e:4x8", 32, (32768, 2048, 8192)),
                                ("v5p:2x2x4", 16, (16384, 4096, 16384)), ("v6e:4x4", 16, (16384, 2048, 8192)),
                                ("v5e:8x8", 64, (65536, 2048, 8192)), ("v4:2x2x2", 16, (16384, 2048, 8192)),
                                ("v5p:4x4x4", 64, (65536, 4096, 16384))]:
        nm = f"fsdp_mlp_{topo.replace(':', '_')}_d{d}"
        def bld(topo=topo, n=n, bt=bt, d=d, f=f):
            sp = [("fsdp", None), ("fsdp", None)]
            return (sgd(mlp, 2), [((d, f), BF), ((f, d), BF), ((bt, d), BF)], sp + [("fsdp", None)], sp,
                    topo, (n,), ("fsdp",))
        case(nm, "fsdp_mlp", bld)

    # 16. sequence-parallel attention (queries split along the sequence, K and V gathered)
    for topo, shape, (b, s, h, dk) in [("v5e:2x4", (2, 4), (8, 4096, 16, 128)), ("v6e:4x4", (4, 4), (16, 4096, 16, 128)),
                                       ("v5p:2x2x2", (2, 4), (8, 4096, 32, 128)), ("v4:2x2x2", (4, 4), (8, 2048, 16, 128))]:
        nm = f"seq_attn_{topo.replace(':', '_')}_s{s}"
        def bld(topo=topo, shape=shape, b=b, s=s, h=h, dk=dk):
            def fn(q, k, v):
                sc = jnp.einsum("bqhk,bshk->bhqs", q, k).astype(F32) / 11.3
                return jnp.einsum("bhqs,bshk->bqhk", jax.nn.softmax(sc, -1).astype(BF), v)
            sp = ("data", "seq", None, None)
            return (fn, [((b, s, h, dk), BF)] * 3, [sp] * 3, [sp], topo, shape, ("data", "seq"))
        case(nm, "seq_attn", bld)

    # 17. Programs added in session 9 (generated before that session changed any rule): the
    #     families above on other slices and shapes, plus a tensor-parallel MLP whose
    #     partial sums the user reduce-scatters by a sharding constraint (Megatron without
    #     sequence parallelism) and a shard_map all-gather matmul written by hand.
    for topo, n, (bt, d, f) in [("v6e:8x8", 64, (65536, 2048, 8192)), ("v5e:4x4", 16, (16384, 4096, 16384)),
                                ("v5e:8x16", 128, (131072, 1024, 4096))]:
        nm = f"fsdp_mlp_{topo.replace(':', '_')}_d{d}"
        def bld(topo=topo, n=n, bt=bt, d=d, f=f):
            sp = [("fsdp", None), ("fsdp", None)]
            return (sgd(mlp, 2), [((d, f), BF), ((f, d), BF), ((bt, d), BF)], sp + [("fsdp", None)], sp,
                    topo, (n,), ("fsdp",))
        case(nm, "fsdp_mlp", bld)
    for topo, n, (bt, d, f) in [("v5p:4x4x4", 64, (65536, 1024, 4096)), ("v6e:8x8", 64, (65536, 1024, 4096)),
                                ("v5e:4x8", 32, (32768, 2048, 8192))]:
        nm = f"zero1_{topo.replace(':', '_')}_d{d}"
        def bld(topo=topo, n=n, bt=bt, d=d, f=f):
            args = [((bt, d), BF), ((d, f), BF), ((f, d), BF), ((d, f), F32), ((f, d), F32), ((d, f), F32), ((f, d), F32)]
            sp = [("data", None), (None, None), (None, None)] + [("data", None)] * 4
            outs = [(None, None), ("data", None), ("data", None)] * 2
            return (zero1, args, sp, outs, topo, (n,), ("data",))
        case(nm, "zero1", bld)
    for topo, n, (bt, d, f) in [("v6e:8x8", 64, (65536, 2048, 8192)), ("v5p:4x4x4", 64, (65536, 2048, 8192))]:
        nm = f"dp_mlp_{topo.replace(':', '_')}_d{d}"
        def bld(topo=topo, n=n, bt=bt, d=d, f=f):
            return (sgd(mlp, 2), [((d, f), BF), ((f, d), BF), ((bt, d), BF)], [(None, None), (None, None), ("data", None)],
                    [(None, None), (None, None)], topo, (n,), ("data",))
        case(nm, "dp_large", bld)
    for topo, shape, (b, s, d, f) in [("v5p:2x2x4", (4, 4), (16, 1024, 4096, 16384)),
                                      ("v5e:4x8", (4, 8), (16, 2048, 2048, 8192))]:
        nm = f"megatron_sp_fwd_{topo.replace(':', '_')}_d{d}"
        def bld(topo=topo, shape=shape, b=b, s=s, d=d, f=f):
            sp = [("data", "model", None), (None,), (None, "model"), ("model", None)]
            return (megatron_sp(False), [((b, s, d), BF), ((d,), F32), ((d, f), BF), ((f, d), BF)], sp, [sp[0]],
                    topo, shape, ("data", "model"))
        case(nm, "megatron_sp", bld)
    for topo, shape, (b, s, d, f) in [("v5e:4x4", (2, 8), (8, 2048, 2048, 8192)), ("v6e:8x8", (8, 8), (32, 2048, 4096, 16384)),
                                      ("v4:2x2x2", (4, 4), (16, 1024, 2048, 8192))]:
        nm = f"tp_mlp_rs_{topo.replace(':', '_')}_d{d}"
        def bld(topo=topo, shape=shape, b=b, s=s, d=d, f=f):
            fn = lambda x, w1, w2: wsc(mlp(x, w1, w2), "data", None, "model")
            return (fn, [((b, s, d), BF), ((d, f), BF), ((f, d), BF)], [("data", None, None), (None, "model"), ("model", None)],
                    [("data", None, "model")], topo, shape, ("data", "model"))
        case(nm, "tp_mlp", bld)
    for topo, n, (m_, k_, n_) in [("v5e:4x4", 16, (16384, 4096, 8192)), ("v5p:2x2x2", 8, (8192, 4096, 8192))]:
        nm = f"ag_matmul_smap_{topo.replace(':', '_')}_{m_}x{k_}x{n_}"
        def bld(topo=topo, n=n, m_=m_, k_=k_, n_=n_):
            def body(x, w):  # x rows split, w columns split: gather x, each chip its columns
                return jax.lax.all_gather(x, "tp", axis=0, tiled=True) @ w
            fn = smap(body, ("tp",), (P("tp", None), P(None, "tp")), P(None, "tp"))
            return (fn, [((m_, k_), BF), ((k_, n_), BF)], [("tp", None), (None, "tp")], [(None, "tp")], topo, (n,), ("tp",))
        case(nm, "ag_matmul", bld)
    for topo, shape, (b, s, d, hh, f) in [("v5e:4x8", (2, 4, 4), (32, 1024, 2048, 16, 8192)),
                                          ("v5p:4x4x4", (4, 4, 4), (64, 1024, 4096, 32, 16384))]:
        nm = f"flax_logical_step_{topo.replace(':', '_')}_d{d}"
        def bld(topo=topo, shape=shape, b=b, s=s, d=d, hh=hh, f=f):
            ws = [((d, hh, 128), BF), ((hh, 128, d), BF), ((d, f), BF), ((f, d), BF)]
            sp = [lspec("embed", "heads", "kv"), lspec("heads", "kv", "embed"), lspec("embed", "mlp"), lspec("mlp", "embed")]
            return (sgd(flax_layer, 4), ws + [((b, s, d), BF)], sp + [(RULES["batch"], None, None)], sp, topo, shape,
                    ("data", "fsdp", "tensor"))
        case(nm, "flax_logical", bld)
    for topo, shape, (b, s, h, dk) in [("v5e:4x4", (4, 4), (16, 4096, 16, 128))]:
        nm = f"seq_attn_{topo.replace(':', '_')}_s{s}"
        def bld(topo=topo, shape=shape, b=b, s=s, h=h, dk=dk):
            def fn(q, k, v):
                sc = jnp.einsum("bqhk,bshk->bhqs", q, k).astype(F32) / 11.3
                return jnp.einsum("bhqs,bshk->bqhk", jax.nn.softmax(sc, -1).astype(BF), v)
            sp = ("data", "seq", None, None)
            return (fn, [((b, s, h, dk), BF)] * 3, [sp] * 3, [sp], topo, shape, ("data", "seq"))
        case(nm, "seq_attn", bld)
    return TOPO


def chip_of(topology):
    gen = topology.split(":")[0]
    return "v4:core" if gen == "v4" else gen


def run_case(name, family, bld, keep_dump=False):
    import numpy as np
    import jax
    from jax.experimental import topologies
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
    f, args, in_specs, out_specs, topo, shape, axes = bld()
    td = topologies.get_topology_desc(platform="tpu", topology_name=topo)
    m = Mesh(np.array(td.devices).reshape(shape), axes)
    sds = [jax.ShapeDtypeStruct(s, t, sharding=NamedSharding(m, P(*sp))) for (s, t), sp in zip(args, in_specs)]
    outs = tuple(NamedSharding(m, P(*sp)) for sp in out_specs)
    dump = tempfile.mkdtemp(prefix="spmdgen.")
    t0 = time.time()
    try:
        with jax.set_mesh(m):
            jf = jax.jit(f, out_shardings=outs if len(outs) > 1 else outs[0])
            lowered = jf.lower(*sds)
            c = lowered.compile(compiler_options={"xla_dump_to": dump, "xla_dump_hlo_pass_re": "spmd-partitioning",
                                                  "xla_dump_large_constants": True})
            res_shapes = jax.tree_util.tree_leaves(jax.eval_shape(f, *sds))
        secs = time.time() - t0
        part = sorted(glob.glob(os.path.join(dump, "*after_*spmd-partitioning.before*")))
        if not part:
            raise RuntimeError("no partitioned dump")
        part_text = open(part[-1]).read()
    finally:
        shutil.rmtree(dump, ignore_errors=True)
    import jaxlib._hlo as H
    o = H.HloPrintOptions()
    o.print_large_constants = True
    final = c.runtime_executable().hlo_modules()[0].to_string(o)
    d = os.path.join(OUT, name)
    tmp = d + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    open(os.path.join(tmp, "prog.hlo"), "w").write(lowered.as_text(dialect="hlo"))
    with gzip.open(os.path.join(tmp, "tpu.hlo.gz"), "wt", compresslevel=9) as g:
        g.write(final)
    with gzip.open(os.path.join(tmp, "tpu_part.hlo.gz"), "wt", compresslevel=9) as g:
        g.write(part_text)
    txt = c.as_text()
    entry = txt[txt.rfind("\nENTRY"):]
    ca = c.cost_analysis()
    ca = ca[0] if isinstance(ca, list) else ca
    shapes = [s for s, _ in args]
    cnt = lambda t: {k: t.count(" " + k + "(") + t.count(" " + k + "-start(") for k in
                     ("all-reduce", "all-gather", "reduce-scatter", "all-to-all", "collective-permute")
                     if (" " + k + "(") in t or (" " + k + "-start(") in t}
    json.dump({"name": name, "family": family, "split": split_of(name), "chip": chip_of(topo), "topology": topo,
               "devices": int(np.prod(shape)), "mesh": dict(zip(axes, shape)), "jax": jax.__version__,
               "in_specs": [str(P(*s)) for s in in_specs], "out_specs": [str(P(*s)) for s in out_specs],
               "out_shardings": [str(o._to_xla_hlo_sharding(len(sh.shape))) for o, sh in
                                 zip(jax.tree_util.tree_leaves(c.output_shardings), res_shapes)],
               "estimated_cycles": sum(int(x) for x in re.findall(r'"estimated_cycles":"(\d+)"', entry)),
               "flops": ca.get("flops"), "compile_s": round(secs, 1),
               "collectives": sorted(set(re.findall(COLL, txt))),
               "collective_counts": cnt(txt), "partitioned_collective_counts": cnt(part_text)},
              open(os.path.join(tmp, "meta.json"), "w"), indent=1)
    shutil.rmtree(d, ignore_errors=True)
    os.rename(tmp, d)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--keep", action="store_true", help="skip cases already written (resume)")
    ap.add_argument("--deadline", default="", help="HH:MM UTC: start no case after it")
    ap.add_argument("--only", default="", help="cases whose name contains this")
    ap.add_argument("--list", action="store_true")
    a = ap.parse_args()
    define()
    deadline = None
    if a.deadline:
        hh, mm = map(int, a.deadline.split(":"))
        now = time.gmtime()
        deadline = time.mktime((now.tm_year, now.tm_mon, now.tm_mday, hh, mm, 0, 0, 0, 0)) - time.timezone
        if deadline < time.time() - 12 * 3600:  # a time past midnight UTC: tomorrow's
            deadline += 24 * 3600
    names = [n for n, _, _ in CASES]
    assert len(names) == len(set(names)), "duplicate case names"
    if a.list:
        for n, fam, _ in CASES:
            print(n, fam, split_of(n))
        print(len(CASES), "cases")
        return
    os.makedirs(OUT, exist_ok=True)
    failed_path = os.path.join(OUT, "_failed.txt")
    failed = set(l.split()[0] for l in open(failed_path)) if os.path.exists(failed_path) else set()
    # round-robin over the families, so a run cut short by its deadline still covers each
    rank, seen = {}, {}
    for n, fam, _ in CASES:
        rank[n] = seen.get(fam, 0)
        seen[fam] = rank[n] + 1
    for name, family, bld in sorted(CASES, key=lambda c: rank[c[0]]):
        if a.only and a.only not in name:
            continue
        if a.keep and (os.path.exists(os.path.join(OUT, name, "meta.json")) or name in failed):
            continue
        if deadline and time.time() > deadline:
            print("deadline reached", flush=True)
            break
        t0 = time.time()
        try:
            run_case(name, family, bld)
            print(f"{name} ({family}, {split_of(name)}): {time.time() - t0:.0f} s", flush=True)
        except Exception as e:  # the compiler's refusal or a case error: recorded, not retried with --keep
            msg = (str(e).strip().splitlines() or ["?"])[0][:200]
            print(f"{name}: FAILED {msg}", flush=True)
            traceback.print_exc(limit=2)
            with open(failed_path, "a") as fo:
                fo.write(f"{name} {msg}\n")


if __name__ == "__main__":
    main()
