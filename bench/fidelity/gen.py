#!/usr/bin/env python3
"""gen.py: the fidelity corpus — realistic single-device JAX programs, each as JAX's
pre-optimization HLO (tpusim's input) beside the XLA TPU compiler's own cost-model figures
for one device of v4, v5e, v5p and v6e (libtpu in compile-only mode: no TPU needed).

    pip install "jax[tpu]==0.10.2"            # jax 0.10.2 + libtpu 0.0.42.1 here
    ALLOW_MULTIPLE_LIBTPU_LOAD=1 python3 bench/fidelity/gen.py [NAME_SUBSTRING...|probes]
    python3 bench/fidelity/gen.py vector_dots            # corpus/vector_dots.json
    python3 bench/fidelity/gen.py row_broadcast          # corpus/row_broadcast.json
    python3 bench/fidelity/gen.py batched_products       # corpus/batched_products.json
    python3 bench/fidelity/gen.py narrow_results         # corpus/narrow_results.json
    python3 bench/fidelity/gen.py vector_ops             # corpus/vector_ops.json
    FIDELITY_HLO_ONLY=1 python3 bench/fidelity/gen.py      # rewrite the .hlo files only (seconds)
    FIDELITY_KEEP=1 ... skips programs whose .json exists; FIDELITY_REVERSE=1 runs the list
    backwards (a second worker from the other end). About 10-20 s per program on 2 cores.
    python3 bench/fidelity/gen.py compiled=v5e NAME...   # the compiler's compiled programs
                                                         # (bench/fidelity/compiled/)

Writes bench/fidelity/corpus/NAME.hlo (jax.jit(f).lower(...).as_text(dialect="hlo")) and
NAME.json: for each generation the topology compiled for, the device kind and TensorCores per
device, every top-level op of the compiled entry computation with an "estimated_cycles" in its
backend_config (name, opcode, fusion kind, metadata op_name, cycles), their sum, cost_analysis
(flops, bytes accessed, transcendentals, optimal_seconds) and memory_analysis (argument,
output, alias, temp, generated code bytes). bench/fidelity/corpus/probes.json records the two
probes from which the compiler's clock and HBM bandwidth are read (docs/fidelity.md).
Nothing in the tests runs this script: they read the committed files."""
import json, os, re, sys, time
os.environ.setdefault("TPU_ACCELERATOR_TYPE", "v5litepod-4")
os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")
import jax, jax.numpy as jnp
from jax.experimental import topologies
from jax.sharding import SingleDeviceSharding

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "corpus")
TOPOLOGIES = {"v4": "v4:2x2x1", "v5e": "v5e:2x2", "v5p": "v5p:2x2x1", "v6e": "v6e:2x2"}
BF, F32, I32 = jnp.bfloat16, jnp.float32, jnp.int32
_topo = {}


def device(chip):
    if chip not in _topo:
        _topo[chip] = topologies.get_topology_desc(platform="tpu", topology_name=TOPOLOGIES[chip])
    return _topo[chip].devices[0]


def sds(shape, dt, dev=None):
    return jax.ShapeDtypeStruct(shape, dt, sharding=SingleDeviceSharding(dev) if dev else None)



def compiled_cases(cases, chips, d, keep=lambda name: True):
    """For probe scripts: each case (name, f, [((shape), dtype), ...]) that keep(name) accepts,
    written as JAX's HLO to d/NAME.hlo, then compiled by libtpu for each chip. Yields
    (name, hlo_path, chip, compiled_text)."""
    for name, f, args in cases:
        if not keep(name):
            continue
        path = os.path.join(d, name + ".hlo")
        open(path, "w").write(jax.jit(f).lower(*[sds(a, t) for a, t in args]).as_text(dialect="hlo", debug_info=True))
        for chip in chips:
            yield name, path, chip, jax.jit(f).lower(*[sds(a, t, device(chip)) for a, t in args]).compile().as_text()

OP_RE = re.compile(r'^\s*(?:ROOT )?%(\S+) = .*? ([a-z][a-z0-9-]*)\((.*)$')


DT_BYTES = {"pred": 1, "s8": 1, "u8": 1, "bf16": 2, "f16": 2, "s16": 2, "u16": 2, "f32": 4, "s32": 4, "u32": 4,
            "f64": 8, "s64": 8, "u64": 8, "c64": 8}


def async_copies(txt):
    """The compiled entry computation's asynchronous copies (copy-start: HBM <-> VMEM moves the
    compiler schedules beside other ops; they carry no estimated_cycles): [name, bytes,
    cross-program prefetch 0/1]."""
    entry = txt[txt.rfind("\nENTRY"):]
    out = []
    for line in entry.splitlines():
        m = re.match(r'\s*(?:ROOT )?%(\S+) = \((\w+)\[([\d,]*)\]', line)
        if m and " copy-start(" in line:
            n = 1
            for x in filter(None, m.group(3).split(",")):
                n *= int(x)
            out.append([m.group(1), n * DT_BYTES.get(m.group(2), 4), int("cross_program_prefetch" in line)])
    return out


def entry_ops(txt):
    """Top-level ops of the compiled entry computation that carry an estimated_cycles."""
    entry = txt[txt.rfind("\nENTRY"):]
    ops = []
    for line in entry.splitlines():
        m = re.search(r'"estimated_cycles":"(\d+)"', line)
        if not m:
            continue
        om = OP_RE.match(line)
        kind = re.search(r'kind=(k\w+)', line)
        on = re.search(r'op_name="([^"]*)"', line)
        ops.append([om.group(1) if om else "?", om.group(2) if om else "?",
                    kind.group(1) if kind else "", on.group(1) if on else "", int(m.group(1))])
    return ops


def entry_fusions(txt):
    """Each fusion of the entry computation (compiled or tpusim's own HLO text): name ->
    (the opcodes of its computation and the fusions nested in it, four deep; its result's
    shape text). The probe scripts use it to find which kernel holds what."""
    comps, cur = {}, None
    for line in txt.splitlines():
        h = re.match(r"^\s*(?:ENTRY )?%?([\w.\-]+) (?:\(.*\) -> .*)?\{\s*$", line)
        if h:
            cur = comps.setdefault(h.group(1), [set(), set()])
            continue
        m = re.match(r"^\s*(?:ROOT )?%?[\w.\-]+ = .*? ([a-z][a-z0-9-]*)\(", line)
        if m and cur is not None:
            cur[0].add(m.group(1))
            for c in re.findall(r"calls=%?([\w.\-]+)", line):
                cur[1].add(c)

    def ops(c, depth=0):
        s = set(comps.get(c, [set(), set()])[0])
        if depth < 4:
            for k in comps.get(c, [set(), set()])[1]:
                s |= ops(k, depth + 1)
        return s
    out = {}
    for line in txt[txt.rfind("ENTRY"):].splitlines():
        m = re.match(r"^\s*(?:ROOT )?%?([\w.\-]+) = (.*?) fusion\(.*calls=%?([\w.\-]+)", line)
        if m:
            out[m.group(1)] = (ops(m.group(3)), m.group(2))
    return out


def write_probe_corpus(cases, out, family, dtypes, argv):
    """A probe's mini corpus in the families' form under OUT (NAME.hlo, NAME.json with the
    compiler's estimated top-level ops per generation, compiled/NAME.GEN.hlo.gz), so the fidelity
    tools read it. CASES: (name, function, [(shape, dtype name)]); ARGV: [CHIPS] [--only SUBSTR];
    a case already written is skipped."""
    import gzip
    import jaxlib._hlo as H
    argv = list(argv)
    only = ""
    if "--only" in argv:
        i = argv.index("--only")
        only = argv[i + 1]
        del argv[i:i + 2]
    chips = argv[0].split(",") if argv else ["v4", "v5e", "v5p", "v6e"]
    os.makedirs(os.path.join(out, "compiled"), exist_ok=True)
    for name, f, sig in cases:
        if only not in name or os.path.exists(os.path.join(out, name + ".json")):
            continue
        plain = [sds(s, dtypes[d]) for s, d in sig]
        open(os.path.join(out, name + ".hlo"), "w").write(jax.jit(f).lower(*plain).as_text(dialect="hlo"))
        rec = {"name": name, "family": family, "category": "probe", "split": "probe", "chips": {}}
        for chip in chips:
            dev = device(chip)
            c = jax.jit(f).lower(*[sds(s, dtypes[d], dev) for s, d in sig]).compile()
            o = H.HloPrintOptions()
            o.print_large_constants = True  # tpusim reads the constants' values
            with gzip.open(os.path.join(out, "compiled", f"{name}.{chip}.hlo.gz"), "wt") as g:
                g.write(c.runtime_executable().hlo_modules()[0].to_string(o))
            ops = entry_ops(c.as_text())
            rec["chips"][chip] = {"ops": ops, "estimated_cycles": sum(o[4] for o in ops)}
            print(name, chip, "; ".join(f"{o[0]}/{o[1]} {o[4]}" for o in ops)[:300], flush=True)
        json.dump(rec, open(os.path.join(out, name + ".json"), "w"))


# Top-level ops that only move bookkeeping (no work of their own to estimate).
BOOKKEEPING = {"parameter", "constant", "tuple", "get-tuple-element", "bitcast", "copy-start", "copy-done",
               "slice-start", "slice-done", "after-all", "add-dependency", "opt-barrier", "partition-id",
               "replica-id"}


DTYPE_BYTES = {"pred": 1, "s8": 1, "u8": 1, "bf16": 2, "f16": 2, "s16": 2, "u16": 2, "f32": 4, "s32": 4, "u32": 4,
               "f64": 8, "s64": 8, "u64": 8}


def unestimated_ops(txt):
    """Top-level ops of the compiled entry computation that do work but carry no
    estimated_cycles (a kCustom scatter fusion, a sort, a reduce-window): the compiler's sum
    leaves them out. [name, opcode, bytes of its first result]; ConcatBitcast custom calls
    (a bitcast) are bookkeeping."""
    entry = txt[txt.rfind("\nENTRY"):]
    out = []
    for line in entry.splitlines():
        om = OP_RE.match(line)
        if not om or '"estimated_cycles"' in line or om.group(2) in BOOKKEEPING:
            continue
        if om.group(2).endswith("-start") or om.group(2).endswith("-done") or "ConcatBitcast" in line:
            continue
        sm = re.search(r" = \(?([a-z0-9]+)\[([0-9,]*)\]", line)
        n = 0
        if sm and sm.group(1) in DTYPE_BYTES:
            n = DTYPE_BYTES[sm.group(1)]
            for d in filter(None, sm.group(2).split(",")):
                n *= int(d)
        out.append([om.group(1), om.group(2), n])
    return out


# ---------------------------------------------------------------------------- programs
PROGS = []


def prog(name, cat, f, *args):
    PROGS.append((name, cat, f, list(args)))


def gemm_cases():
    shapes = [(128, 128, 128), (256, 256, 256), (512, 512, 512), (1024, 1024, 1024), (2048, 2048, 2048),
              (4096, 4096, 4096), (8192, 8192, 8192), (1000, 1000, 1000), (777, 1234, 555),
              (4096, 1024, 4096), (1024, 8192, 1024), (8192, 1024, 8192), (2048, 8192, 2048),
              (16384, 512, 512), (512, 512, 16384)]
    for m, k, n in shapes:
        prog(f"gemm_bf16_{m}x{k}x{n}", "gemm", lambda a, b: a @ b, ((m, k), BF), ((k, n), BF))
    for m, k, n in [(512, 512, 512), (1024, 1024, 1024), (2048, 2048, 2048), (4096, 4096, 4096), (1000, 1000, 1000)]:
        prog(f"gemm_f32_{m}x{k}x{n}", "gemm", lambda a, b: a @ b, ((m, k), F32), ((k, n), F32))
    # decode-like skinny GEMMs (batch of tokens x weight)
    for m, k, n in [(1, 4096, 4096), (8, 4096, 4096), (16, 8192, 8192), (32, 4096, 14336), (1, 8192, 28672),
                    (64, 4096, 11008), (128, 5120, 5120), (8, 2048, 32000), (4, 14336, 4096)]:
        prog(f"decode_bf16_{m}x{k}x{n}", "gemm-skinny", lambda a, b: a @ b, ((m, k), BF), ((k, n), BF))
    for m, k, n in [(8, 4096, 4096), (1, 8192, 8192)]:
        prog(f"decode_f32_{m}x{k}x{n}", "gemm-skinny", lambda a, b: a @ b, ((m, k), F32), ((k, n), F32))
    for b, m, k, n in [(16, 512, 64, 512), (64, 128, 128, 128), (8, 1024, 1024, 1024), (32, 256, 512, 256)]:
        prog(f"bmm_bf16_{b}x{m}x{k}x{n}", "gemm-batched", lambda x, y: jnp.einsum("bmk,bkn->bmn", x, y),
             ((b, m, k), BF), ((b, k, n), BF))
    prog("gemm_bias_gelu_bf16_2048x4096x4096", "gemm-fused",
         lambda x, w, b: jax.nn.gelu(x @ w + b), ((2048, 4096), BF), ((4096, 4096), BF), ((4096,), BF))
    prog("gemm_relu_f32out_1024x2048x2048", "gemm-fused",
         lambda x, w: jax.nn.relu(jnp.dot(x, w, preferred_element_type=F32)), ((1024, 2048), BF), ((2048, 2048), BF))


def attention(q, k, v, causal):
    d = q.shape[-1]
    s = jnp.einsum("bhqd,bhkd->bhqk", q, k).astype(F32) / (d ** 0.5)
    if causal:
        n = q.shape[2]
        s = jnp.where(jnp.tril(jnp.ones((n, n), bool)), s, -1e9)
    p = jax.nn.softmax(s, -1).astype(q.dtype)
    return jnp.einsum("bhqk,bhkd->bhqd", p, v)


def attention_cases():
    for b, h, s, d, causal in [(1, 8, 512, 64, False), (4, 16, 1024, 128, True), (2, 32, 2048, 128, True),
                               (8, 12, 512, 64, False), (1, 32, 4096, 128, True)]:
        sh = ((b, h, s, d), BF)
        prog(f"attn_fwd_b{b}h{h}s{s}d{d}{'_causal' if causal else ''}", "attention",
             lambda q, k, v, c=causal: attention(q, k, v, c), sh, sh, sh)
    for b, h, s, d in [(1, 8, 512, 64), (4, 16, 1024, 128), (2, 32, 2048, 128)]:
        sh = ((b, h, s, d), BF)
        prog(f"attn_bwd_b{b}h{h}s{s}d{d}_causal", "attention",
             lambda q, k, v: jax.grad(lambda q, k, v: attention(q, k, v, True).astype(F32).sum(), (0, 1, 2))(q, k, v),
             sh, sh, sh)
    # single-token decode attention over a KV cache
    for b, h, s, d in [(8, 32, 2048, 128), (1, 32, 8192, 128)]:
        prog(f"attn_decode_b{b}h{h}kv{s}d{d}", "attention",
             lambda q, k, v: attention(q, k, v, False), ((b, h, 1, d), BF), ((b, h, s, d), BF), ((b, h, s, d), BF))


def rmsnorm(x, g):
    xf = x.astype(F32)
    return (xf * jax.lax.rsqrt((xf * xf).mean(-1, keepdims=True) + 1e-6) * g).astype(x.dtype)


def layernorm(x, g, b):
    xf = x.astype(F32)
    m = xf.mean(-1, keepdims=True)
    v = ((xf - m) ** 2).mean(-1, keepdims=True)
    return ((xf - m) * jax.lax.rsqrt(v + 1e-5) * g + b).astype(x.dtype)


def block(x, p, heads):
    """A pre-norm transformer layer (RMSNorm, MHA with causal mask, SwiGLU MLP)."""
    bsz, s, dm = x.shape
    dh = dm // heads
    h = rmsnorm(x, p["n1"])
    q = (h @ p["wq"]).reshape(bsz, s, heads, dh).transpose(0, 2, 1, 3)
    k = (h @ p["wk"]).reshape(bsz, s, heads, dh).transpose(0, 2, 1, 3)
    v = (h @ p["wv"]).reshape(bsz, s, heads, dh).transpose(0, 2, 1, 3)
    a = attention(q, k, v, True).transpose(0, 2, 1, 3).reshape(bsz, s, dm)
    x = x + a @ p["wo"]
    h = rmsnorm(x, p["n2"])
    return x + (jax.nn.silu(h @ p["w1"]) * (h @ p["w3"])) @ p["w2"]


def block_params(dm, ff):
    sq = ((dm, dm), BF)
    return {"n1": ((dm,), F32), "n2": ((dm,), F32), "wq": sq, "wk": sq, "wv": sq, "wo": sq,
            "w1": ((dm, ff), BF), "w3": ((dm, ff), BF), "w2": ((ff, dm), BF)}


def transformer_cases():
    for bsz, s, dm, heads, ff in [(1, 512, 512, 8, 1536), (4, 1024, 1024, 16, 2816), (2, 2048, 2048, 16, 5632),
                                  (1, 2048, 4096, 32, 11008), (8, 512, 768, 12, 3072)]:
        keys = sorted(block_params(dm, ff))
        pshapes = block_params(dm, ff)

        def fwd(x, *ps, keys=keys, heads=heads):
            return block(x, dict(zip(keys, ps)), heads)

        def bwd(x, *ps, keys=keys, heads=heads):
            return jax.grad(lambda x, ps: block(x, dict(zip(keys, ps)), heads).astype(F32).mean(), (0, 1))(x, list(ps))

        tag = f"b{bsz}s{s}d{dm}"
        prog(f"layer_fwd_{tag}", "transformer", fwd, ((bsz, s, dm), BF), *[pshapes[k] for k in keys])
        prog(f"layer_bwd_{tag}", "transformer", bwd, ((bsz, s, dm), BF), *[pshapes[k] for k in keys])


def norm_cases():
    for n, d, dt in [(4096, 1024, BF), (8192, 4096, BF), (16384, 768, F32), (2048, 8192, BF)]:
        prog(f"rmsnorm_fwd_{n}x{d}_{jnp.dtype(dt).name}", "norm", rmsnorm, ((n, d), dt), ((d,), F32))
        prog(f"layernorm_fwd_{n}x{d}_{jnp.dtype(dt).name}", "norm", layernorm, ((n, d), dt), ((d,), F32), ((d,), F32))
    for n, d in [(4096, 1024), (8192, 4096)]:
        prog(f"rmsnorm_bwd_{n}x{d}_bf16", "norm",
             lambda x, g: jax.grad(lambda x, g: rmsnorm(x, g).astype(F32).sum(), (0, 1))(x, g), ((n, d), BF), ((d,), F32))
        prog(f"layernorm_bwd_{n}x{d}_bf16", "norm",
             lambda x, g, b: jax.grad(lambda x, g, b: layernorm(x, g, b).astype(F32).sum(), (0, 1, 2))(x, g, b),
             ((n, d), BF), ((d,), F32), ((d,), F32))


def softmax_elementwise_cases():
    for n, d, dt in [(4096, 4096, F32), (8192, 32000, BF), (65536, 128, F32), (1024, 1024, BF)]:
        prog(f"softmax_{n}x{d}_{jnp.dtype(dt).name}", "softmax", lambda x: jax.nn.softmax(x, -1), ((n, d), dt))
    prog("cross_entropy_8192x32000_bf16", "softmax",
         lambda lg, y: -jnp.take_along_axis(jax.nn.log_softmax(lg.astype(F32), -1), y[:, None], 1).mean(),
         ((8192, 32000), BF), ((8192,), I32))
    prog("cross_entropy_grad_4096x32000_bf16", "softmax",
         jax.grad(lambda lg, y: -jnp.take_along_axis(jax.nn.log_softmax(lg.astype(F32), -1), y[:, None], 1).mean()),
         ((4096, 32000), BF), ((4096,), I32))
    for n, dt in [(8192, F32), (4096, BF)]:
        prog(f"gelu_{n}x{n}_{jnp.dtype(dt).name}", "elementwise", jax.nn.gelu, ((n, n), dt))
    prog("add_8192x8192_f32", "elementwise", lambda a, b: a + b, ((8192, 8192), F32), ((8192, 8192), F32))
    prog("exp_mul_4096x4096_f32", "elementwise", lambda a, b: jnp.exp(a) * b, ((4096, 4096), F32), ((4096, 4096), F32))
    prog("convert_8192x8192_f32_bf16", "elementwise", lambda a: a.astype(BF), ((8192, 8192), F32))
    prog("silu_mul_16x1024x11008_bf16", "elementwise", lambda a, b: jax.nn.silu(a) * b,
         ((16, 1024, 11008), BF), ((16, 1024, 11008), BF))


def embed_cases():
    for v, d, n in [(32000, 4096, 8192), (50257, 768, 16384), (256000, 2048, 4096)]:
        prog(f"embed_lookup_v{v}d{d}n{n}", "embedding", lambda e, t: e[t], ((v, d), BF), ((n,), I32))
    for v, d, n in [(32000, 4096, 8192), (50257, 768, 16384)]:
        prog(f"embed_grad_v{v}d{d}n{n}", "embedding",
             lambda e, t, g: jax.grad(lambda e: (e[t].astype(F32) * g).sum())(e), ((v, d), BF), ((n,), I32), ((n, d), F32))


def conv(x, w, stride=1, pad="SAME"):
    return jax.lax.conv_general_dilated(x, w, (stride, stride), pad, dimension_numbers=("NHWC", "HWIO", "NHWC"))


def conv_cases():
    layers = [("stem7x7", 32, 224, 3, 64, 7, 2), ("c3x3_56_64", 32, 56, 64, 64, 3, 1),
              ("c1x1_56_64_256", 32, 56, 64, 256, 1, 1), ("c3x3_28_128", 32, 28, 128, 128, 3, 1),
              ("c3x3_14_256", 32, 14, 256, 256, 3, 1), ("c3x3_7_512", 32, 7, 512, 512, 3, 1),
              ("c3x3s2_56_128", 32, 56, 64, 128, 3, 2), ("c1x1_14_1024_256", 64, 14, 1024, 256, 1, 1)]
    for tag, n, hw, ci, co, k, st in layers:
        xs, ws = ((n, hw, hw, ci), BF), ((k, k, ci, co), BF)
        prog(f"conv_fwd_{tag}_bf16", "conv", lambda x, w, st=st: jax.nn.relu(conv(x, w, st)), xs, ws)
        if tag in ("c3x3_56_64", "c3x3_14_256", "c1x1_56_64_256", "c3x3s2_56_128", "stem7x7"):
            prog(f"conv_bwd_{tag}_bf16", "conv",
                 lambda x, w, st=st: jax.grad(lambda x, w: conv(x, w, st).astype(F32).sum(), (0, 1))(x, w), xs, ws)
    prog("conv_fwd_c3x3_28_128_f32", "conv", lambda x, w: conv(x, w), ((16, 28, 28, 128), F32), ((3, 3, 128, 128), F32))

    def bottleneck(x, w1, w2, w3):
        h = jax.nn.relu(conv(x, w1))
        h = jax.nn.relu(conv(h, w2))
        return jax.nn.relu(conv(h, w3) + x)

    shp = [((32, 56, 56, 256), BF), ((1, 1, 256, 64), BF), ((3, 3, 64, 64), BF), ((1, 1, 64, 256), BF)]
    prog("resnet_bottleneck_fwd_bf16", "conv", bottleneck, *shp)
    prog("resnet_bottleneck_bwd_bf16", "conv",
         lambda *a: jax.grad(lambda *a: bottleneck(*a).astype(F32).sum(), (0, 1, 2, 3))(*a), *shp)
    prog("maxpool3x3s2_32x112x112x64_bf16", "conv",
         lambda x: jax.lax.reduce_window(x, -jnp.inf, jax.lax.max, (1, 3, 3, 1), (1, 2, 2, 1), "SAME"),
         ((32, 112, 112, 64), BF))


def optimizer_cases():
    def adam(p, m, v, g, lr=1e-3, b1=0.9, b2=0.999, eps=1e-8, t=10):
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g * g
        mh, vh = m / (1 - b1 ** t), v / (1 - b2 ** t)
        return p - lr * mh / (jnp.sqrt(vh) + eps), m, v

    def adamw_tree(ps, ms, vs, gs):
        return jax.tree_util.tree_map(lambda p, m, v, g: adam(p, m, v, g), ps, ms, vs, gs)

    for n in [1 << 20, 1 << 24, 1 << 26]:
        prog(f"adam_f32_{n}", "optimizer", adam, *[((n,), F32)] * 4)
    tree = [((4096, 4096), F32), ((4096, 11008), F32), ((11008, 4096), F32), ((4096,), F32)]
    prog("adam_tree_llama_layer_f32", "optimizer", adamw_tree, tree, tree, tree, tree)
    for n in [1 << 22, 1 << 26]:
        prog(f"sgd_momentum_f32_{n}", "optimizer", lambda p, m, g: (p - 0.01 * (0.9 * m + g), 0.9 * m + g),
             *[((n,), F32)] * 3)
    prog("sgd_bf16_params_f32_grads_16M", "optimizer", lambda p, g: (p.astype(F32) - 0.01 * g).astype(BF),
         ((1 << 24,), BF), ((1 << 24,), F32))

    def mlp_step(w1, w2, x, y):
        loss = lambda w1, w2: jnp.mean((jax.nn.relu(x @ w1) @ w2 - y).astype(F32) ** 2)
        g1, g2 = jax.grad(loss, (0, 1))(w1, w2)
        return (w1 - 0.01 * g1).astype(BF), (w2 - 0.01 * g2).astype(BF)

    prog("mlp_train_step_bf16", "optimizer", mlp_step, ((1024, 4096), BF), ((4096, 1024), BF),
         ((2048, 1024), BF), ((2048, 1024), BF))


def reduction_transpose_cases():
    for shape, axis, dt in [((8192, 8192), 1, F32), ((8192, 8192), 0, F32), ((64, 1024, 1024), (1, 2), BF),
                            ((4096, 4096), None, F32)]:
        tag = "x".join(map(str, shape))
        prog(f"reduce_sum_{tag}_ax{axis if axis is not None else 'all'}_{jnp.dtype(dt).name}".replace(" ", "")
             .replace("(", "").replace(")", "").replace(",", ""), "reduction",
             lambda x, a=axis: x.astype(F32).sum(a), (shape, dt))
    prog("reduce_max_8192x8192_ax1_bf16", "reduction", lambda x: x.max(1), ((8192, 8192), BF))
    prog("mean_var_16384x1024_f32", "reduction", lambda x: (x.mean(0), x.var(0)), ((16384, 1024), F32))
    prog("argmax_8192x32000_bf16", "reduction", lambda x: jnp.argmax(x, -1), ((8192, 32000), BF))
    for shape, perm, dt in [((8192, 8192), (1, 0), F32), ((4096, 4096), (1, 0), BF),
                            ((32, 1024, 16, 128), (0, 2, 1, 3), BF), ((64, 512, 512), (0, 2, 1), F32),
                            ((16, 64, 64, 256), (0, 3, 1, 2), BF)]:
        tag = "x".join(map(str, shape)) + "_p" + "".join(map(str, perm))
        prog(f"transpose_{tag}_{jnp.dtype(dt).name}", "transpose", lambda x, p=perm: jnp.transpose(x, p) * 2,
             (shape, dt))


def build():
    gemm_cases()
    attention_cases()
    transformer_cases()
    norm_cases()
    softmax_elementwise_cases()
    embed_cases()
    conv_cases()
    optimizer_cases()
    reduction_transpose_cases()


def one(name, cat, f, args):
    leaf = lambda a: isinstance(a, tuple) and len(a) == 2 and isinstance(a[0], tuple)
    plain = jax.tree_util.tree_map(lambda sd: sds(*sd), args, is_leaf=leaf)
    # debug_info keeps each instruction's metadata op_name (and stack frames): the key that
    # pairs tpusim's ops with the compiler's fusions in compare.py
    hlo = jax.jit(f).lower(*plain).as_text(dialect="hlo", debug_info=True)
    if os.environ.get("FIDELITY_HLO_ONLY"):
        open(os.path.join(OUT, name + ".hlo"), "w").write(hlo)
        return
    rec = {"name": name, "category": cat, "jax": jax.__version__, "chips": {}}
    for chip in TOPOLOGIES:
        dev = device(chip)
        spec = jax.tree_util.tree_map(lambda sd: sds(sd[0], sd[1], dev), args, is_leaf=leaf)
        c = jax.jit(f).lower(*spec).compile()
        txt = c.as_text()
        ops = entry_ops(txt)
        ca = c.cost_analysis()
        ca = ca[0] if isinstance(ca, list) else ca
        ms = c.memory_analysis()
        rec["chips"][chip] = {
            "topology": TOPOLOGIES[chip], "device_kind": dev.device_kind,
            "cores_per_device": getattr(dev, "num_cores", 1),
            "estimated_cycles": sum(o[4] for o in ops), "ops": ops, "async_copies": async_copies(txt),
            "unestimated": unestimated_ops(txt),
            "flops": ca.get("flops"), "bytes_accessed": ca.get("bytes accessed"),
            "transcendentals": ca.get("transcendentals"), "optimal_seconds": ca.get("optimal_seconds"),
            "memory": {"argument": ms.argument_size_in_bytes, "output": ms.output_size_in_bytes,
                       "alias": ms.alias_size_in_bytes, "temp": ms.temp_size_in_bytes,
                       "code": ms.generated_code_size_in_bytes}}
    open(os.path.join(OUT, name + ".hlo"), "w").write(hlo)
    with open(os.path.join(OUT, name + ".json"), "w") as fh:
        json.dump(rec, fh, separators=(",", ":"))


def fma100(x):
    """100 multiply-adds per element: vector-unit bound (200 ops per element on 64 MiB)."""
    y = x
    for i in range(100):
        y = y * x + float(i)
    return y


def vmem_bytes(dev):
    """The VMEM the compiler allocates from on this device: a Pallas kernel asking for a 1 GiB
    VMEM scratch buffer is refused with "would exceed memory (size=N)"."""
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import tpu as pltpu

    def kern(x_ref, o_ref, s_ref):
        s_ref[0:8, :] = x_ref[...]
        o_ref[...] = s_ref[0:8, :] * 2

    f = pl.pallas_call(kern, out_shape=jax.ShapeDtypeStruct((8, 128), F32),
                       scratch_shapes=[pltpu.VMEM(((1 << 30) // 512, 128), F32)],
                       compiler_params=pltpu.CompilerParams(vmem_limit_bytes=1 << 31))
    try:
        jax.jit(f).lower(sds((8, 128), F32, dev)).compile()
    except Exception as e:
        m = re.search(r"would exceed memory \(size=(\d+)\)", str(e))
        if m:
            return int(m.group(1))
    return None


def probes():
    """The compiler's roofline peak and HBM bandwidth per generation: cost_analysis's
    optimal_seconds of a compute-bound GEMM (8192^3 bf16) and of a memory-bound add
    (two 256 MiB f32 operands), next to the cycles its per-op cost model gives them."""
    res = {}
    for chip in TOPOLOGIES:
        dev = device(chip)
        r = {}
        for tag, f, a in [("gemm_bf16_8192", lambda a, b: a @ b, [((8192, 8192), BF)] * 2),
                          ("gemm_bf16_128", lambda a, b: a @ b, [((128, 128), BF)] * 2),
                          ("add_f32_8192x8192", lambda a, b: a + b, [((8192, 8192), F32)] * 2),
                          ("copy_f32_8192x8192", lambda a: a * 1.0 + 0.0, [((8192, 8192), F32)]),
                          ("neg_f32_8192x8192", lambda a: -a, [((8192, 8192), F32)]),
                          ("scale_f32_8192x8192", lambda a: a * 2.0 + 1.0, [((8192, 8192), F32)]),
                          ("convert_f32_bf16_8192x8192", lambda a: a.astype(BF), [((8192, 8192), F32)]),
                          ("neg_f32_128x128", lambda a: -a, [((128, 128), F32)]),
                          ("neg_f32_256x256", lambda a: -a, [((256, 256), F32)]),
                          ("fma100_f32_4096x4096", fma100, [((4096, 4096), F32)]),
                          # per-element stream costs (chip stream_pass_bytes, lone_op_bytes,
                          # lone_op_min_bytes, transpose_bytes; docs/fidelity.md)
                          ("add5_f32_8192x8192", lambda a, b, c, d, e: a * b + c * d + e, [((8192, 8192), F32)] * 5),
                          ("scale_bf16_8192x8192", lambda a: a * 2 + 1, [((8192, 8192), BF)]),
                          ("sumsq0_f32_8192x8192", lambda a: (a * a).sum(0), [((8192, 8192), F32)]),
                          ("sum1_f32_8192x8192", lambda a: a.sum(1), [((8192, 8192), F32)]),
                          ("transpose_f32_8192x8192", lambda a: a.T, [((8192, 8192), F32)]),
                          # a matmul's result pass (chip result_pass_bytes): K = 128, the
                          # result dominates; 16-bit vs 32-bit result
                          ("gemm_bf16out_8192x128x8192", lambda a, b: a @ b, [((8192, 128), BF), ((128, 8192), BF)]),
                          ("gemm_f32out_8192x128x8192", lambda a, b: jnp.dot(a, b, preferred_element_type=F32),
                           [((8192, 128), BF), ((128, 8192), BF)]),
                          # a matmul's bf16 result kept in VMEM still pays its pass (timing.md
                          # "Memory spaces"): the same kernel writing HBM, and read twice
                          ("gemm_relu_hbm_8192x512x2048", lambda a, b: jax.nn.relu(a @ b), [((8192, 512), BF), ((512, 2048), BF)]),
                          ("gemm_relu_vmem_8192x512x2048", lambda a, b: (lambda y: (y, y.T))(jax.nn.relu(a @ b)),
                           [((8192, 512), BF), ((512, 2048), BF)]),
                          # a vector kernel reading its operand from VMEM (chip vmem_read_cost):
                          # x.T * 2 (a transposing copy into VMEM, then the scale) against x * 2
                          ("vmem_read_T_f32_4096x4096", lambda a: a.T * 2, [((4096, 4096), F32)]),
                          ("vmem_read_plain_f32_4096x4096", lambda a: a * 2, [((4096, 4096), F32)]),
                          ("vmem_read_T_bf16_8192x2048", lambda a: a.T * 2, [((8192, 2048), BF)]),
                          ("vmem_read_plain_bf16_8192x2048", lambda a: a * 2, [((8192, 2048), BF)])] + [
                          # a matmul streaming its weight from HBM (chip matmul_stream_efficiency):
                          # few rows, weights of 128 MiB and more (no cross-program prefetch)
                          (f"mm_stream_{m}x{k}x{n}", lambda a, b: a @ b, [((m, k), BF), ((k, n), BF)])
                          for m, k, n in ((16, 8192, 8192), (16, 8192, 16384), (8, 16384, 8192), (32, 8192, 12288))] + [
                          (f"neg_f32_{r}x1024", lambda a: -a, [((r, 1024), F32)]) for r in (256, 512, 768, 1024, 1536, 2048, 4096)]:
            c = jax.jit(f).lower(*[sds(s, d, dev) for s, d in a]).compile()
            ca = c.cost_analysis()
            ca = ca[0] if isinstance(ca, list) else ca
            ops = entry_ops(c.as_text())
            r[tag] = {"estimated_cycles": sum(o[4] for o in ops), "flops": ca.get("flops"),
                      "bytes_accessed": ca.get("bytes accessed"), "optimal_seconds": ca.get("optimal_seconds")}
            if tag.startswith("gemm_relu_") or tag.startswith("vmem_read_"):
                r[tag]["ops"] = [(o[0], o[4]) for o in ops]
        g, m = r["gemm_bf16_8192"], r["add_f32_8192x8192"]
        r["roofline_peak_flops"] = g["flops"] / g["optimal_seconds"]
        r["roofline_hbm_bw"] = m["bytes_accessed"] / m["optimal_seconds"]
        # bytes per cycle of the streaming ops (operands + result over their cycles)
        r["stream_bytes_per_cycle"] = {k: r[k]["bytes_accessed"] / r[k]["estimated_cycles"] for k in
                                       ("add_f32_8192x8192", "copy_f32_8192x8192", "neg_f32_8192x8192",
                                        "scale_f32_8192x8192", "convert_f32_bf16_8192x8192")}
        # The per-element stream costs, in bytes at the streaming rate B of a wide fused
        # elementwise op (five f32 operands and a result: 24 bytes per element):
        n = 8192 * 8192
        B = 24 * n / r["add5_f32_8192x8192"]["estimated_cycles"]
        per = lambda k, elems=n: r[k]["estimated_cycles"] / elems * B  # bytes-equivalent per element
        r["stream_rate_B_per_cycle"] = B
        r["stream_pass_bytes"] = {"scale_bf16 (4 B moved)": per("scale_bf16_8192x8192") - 4,
                                  "sumsq0_f32 fused reduce (4 B moved)": per("sumsq0_f32_8192x8192") - 4}
        r["lone_op_bytes"] = {"neg_f32 8192x8192 (8 B moved)": per("neg_f32_8192x8192") - 8,
                              "sum1_f32 lone reduce (4 B moved, one stream pass)":
                                  per("sum1_f32_8192x8192") - 4 - r["stream_pass_bytes"]["sumsq0_f32 fused reduce (4 B moved)"]}
        r["lone_op_by_rows"] = {rows: per(f"neg_f32_{rows}x1024", rows * 1024) - 8 for rows in (256, 512, 768, 1024, 1536, 2048, 4096)}
        r["transpose_bytes"] = per("transpose_f32_8192x8192") - 8
        # a 16-bit result costs its 2 bytes and the pass; the f32 result of the same matmul
        # its 4 bytes (the 4 MiB of inputs are in both)
        r["result_pass_bytes"] = per("gemm_bf16out_8192x128x8192") - per("gemm_f32out_8192x128x8192") + 2
        # what the scale saves when its operand is in VMEM (x.T * 2: the copy puts x.T in
        # S(1) on v5e and v6e; on v4 and v5p it stays in HBM, so there both read HBM), as a
        # share of the read's bytes at the streaming rate B: chip vmem_read_cost = 1 - share
        # the rate a matmul streams its weight at, against the streaming rate B of the wide
        # elementwise op: its weight's bytes per cycle over B (median of the four shapes)
        ms = sorted((k_ * n_ * 2 / r[f"mm_stream_{m_}x{k_}x{n_}"]["estimated_cycles"]) / B
                    for m_, k_, n_ in ((16, 8192, 8192), (16, 8192, 16384), (8, 16384, 8192), (32, 8192, 12288)))
        r["matmul_stream_efficiency"] = {"shapes": ms, "median": (ms[1] + ms[2]) / 2}
        r["vmem_read"] = {}
        for dt, n, eb in (("f32_4096x4096", 4096 * 4096, 4), ("bf16_8192x2048", 8192 * 2048, 2)):
            kern = lambda t: [c for name, c in r[t]["ops"] if "multiply" in name][-1]
            saved = (kern("vmem_read_plain_" + dt) - kern("vmem_read_T_" + dt)) * B / (n * eb)
            r["vmem_read"][dt] = {"plain": kern("vmem_read_plain_" + dt), "from_vmem": kern("vmem_read_T_" + dt),
                                  "share_of_read_saved": saved}
        r["vmem_bytes"] = vmem_bytes(dev)
        r["device_kind"], r["cores_per_device"] = dev.device_kind, getattr(dev, "num_cores", 1)
        res[chip] = r
        print(chip, json.dumps(r))
    json.dump(res, open(os.path.join(OUT, "probes.json"), "w"), indent=1)


def compiled(names, chip):
    """The compiler's own compiled program for `chip` of each named corpus program, as it
    would run (large constants printed): bench/fidelity/compiled/NAME.CHIP.hlo. tpusim times
    these as they are (tests/cli/compiled_timing.sh): the input-fidelity check of issue 10
    section 1, against the same estimated_cycles as NAME.json."""
    import jaxlib._hlo as H
    out = os.path.join(HERE, "compiled")
    os.makedirs(out, exist_ok=True)
    leaf = lambda a: isinstance(a, tuple) and len(a) == 2 and isinstance(a[0], tuple)
    for name, cat, f, args in PROGS:
        if name not in names:
            continue
        dev = device(chip)
        spec = jax.tree_util.tree_map(lambda sd: sds(sd[0], sd[1], dev), args, is_leaf=leaf)
        c = jax.jit(f).lower(*spec).compile()
        o = H.HloPrintOptions()
        o.print_large_constants = True
        open(os.path.join(out, f"{name}.{chip}.hlo"), "w").write(c.runtime_executable().hlo_modules()[0].to_string(o))
        print("wrote", name, chip)


def vector_dots():
    """Where the compiler runs a batched dot with a vector operand (one-query attention's
    p . v): per generation, the compiled entry ops (name, fusion kind, cycles) of
    einsum('bhqk,bhkd->bhqd') with q = 1 and p a parameter, p * 2, exp(p), p / sum(p), a
    bf16 -> f32 -> bf16 round trip, a scaled v, softmax(p); of 'bhk,bhkd->bhd' (no q
    dimension) with p a parameter and with softmax(p); and of whole decode attention (the
    corpus's attention(), q = 1) at 10 shapes. Writes corpus/vector_dots.json (chip
    vpu_batched_vector_dots; docs/fidelity.md)."""
    e4, e3 = "bhqk,bhkd->bhqd", "bhk,bhkd->bhd"
    sm = lambda p: jax.nn.softmax(p.astype(F32), -1).astype(BF)
    forms = {"q1_param": (lambda p, v: jnp.einsum(e4, p, v), 4),
             "q1_mul2": (lambda p, v: jnp.einsum(e4, p * 2, v), 4),
             "q1_exp": (lambda p, v: jnp.einsum(e4, jnp.exp(p), v), 4),
             "q1_sum_div": (lambda p, v: jnp.einsum(e4, p / p.sum(-1, keepdims=True), v), 4),
             "q1_f32_round_trip": (lambda p, v: jnp.einsum(e4, (p.astype(F32) * 2).astype(BF), v), 4),
             "q1_scaled_v": (lambda p, v: jnp.einsum(e4, p, v * 2), 4),
             "q1_softmax": (lambda p, v: jnp.einsum(e4, sm(p), v), 4),
             "noq_param": (lambda p, v: jnp.einsum(e3, p, v), 3),
             "noq_softmax": (lambda p, v: jnp.einsum(e3, sm(p), v), 3)}
    res = {}
    for chip in TOPOLOGIES:
        dev = device(chip)
        r = {}
        b, h, k, d = 8, 32, 2048, 128
        for tag, (f, rank) in forms.items():
            ps = (b, h, 1, k) if rank == 4 else (b, h, k)
            c = jax.jit(f).lower(sds(ps, BF, dev), sds((b, h, k, d), BF, dev)).compile()
            r[tag] = [[o[0], o[2], o[4]] for o in entry_ops(c.as_text())]
        for b, h, k, d in ((8, 32, 2048, 128), (4, 32, 2048, 128), (2, 32, 2048, 128), (8, 8, 2048, 128),
                           (8, 32, 1024, 128), (8, 32, 4096, 128), (8, 32, 2048, 64), (16, 32, 2048, 128),
                           (32, 32, 512, 128), (8, 32, 512, 128)):
            c = jax.jit(lambda q, kk, v: attention(q, kk, v, False)).lower(
                sds((b, h, 1, d), BF, dev), sds((b, h, k, d), BF, dev), sds((b, h, k, d), BF, dev)).compile()
            r[f"attention_b{b}h{h}kv{k}d{d}"] = [[o[0], o[2], o[4]] for o in entry_ops(c.as_text())]
        res[chip] = r
        print(chip, json.dumps(r), flush=True)
    json.dump(res, open(os.path.join(OUT, "vector_dots.json"), "w"), indent=1)


def eup():
    """The transcendental unit in the compiler's cost model: per generation, the cycles of k
    chained transcendentals over [4096,4096] in f32 and bf16 (compute-bound at k = 64; k = 1
    is the memory floor), bare (y = f(y)) and with a multiply (y = f(y) * 0.5) or an add
    (y = f(y + 2) * 0.5). Writes corpus/eup.json (chip eup_pushes_per_cycle, the EUP and VPU
    costs of tile.c; docs/fidelity.md)."""
    fns = {"exp": jnp.exp, "tanh": jnp.tanh, "rsqrt": jax.lax.rsqrt, "sqrt": jnp.sqrt, "log": jnp.log,
           "logistic": jax.nn.sigmoid}

    def chain(fn, k, form):
        def f(x):
            y = x
            for _ in range(k):
                y = fn(y) if form == "bare" else fn(y) * 0.5 if form == "mul" else fn(y + 2.0) * 0.5
            return y
        return f
    cases = [(n, "bare", 64) for n in fns] + [("exp", "mul", 64), ("exp", "mul", 1), ("rsqrt", "add_mul", 64),
                                              ("log", "add_mul", 64)]
    res = {}
    for chip in TOPOLOGIES:
        dev = device(chip)
        r = {}
        for n, form, k in cases:
            for dt in (F32, BF):
                c = jax.jit(chain(fns[n], k, form)).lower(sds((4096, 4096), dt, dev)).compile()
                r[f"{n} {form} k={k} {jnp.dtype(dt).name}"] = sum(o[4] for o in entry_ops(c.as_text()))
        res[chip] = {"cores_per_device": getattr(dev, "num_cores", 1), "cycles": r}
        print(chip, json.dumps(res[chip]), flush=True)
    json.dump(res, open(os.path.join(OUT, "eup.json"), "w"), indent=1)


def vector_ops():
    """The vector-unit functions the eup probe does not reach: per generation, the cycles of
    k = 2 and 6 chained y = f(y) * 0.5 over [2048,2048] (4,096 f32 registers), compute-bound at
    both, so that the difference over 4 links is the function's own cost (and the multiply's)
    free of the memory floor: sine and cosine of f32, sine of bf16. Writes
    corpus/vector_ops.json (tile.c elem_cost; docs/timing.md "Vector cost table")."""
    cases = [("sin", jnp.sin, F32), ("cos", jnp.cos, F32), ("sin", jnp.sin, BF)]

    def chain(fn, k):
        def f(x):
            y = x
            for _ in range(k):
                y = fn(y) * 0.5
            return y
        return f
    res = {}
    for chip in TOPOLOGIES:
        dev = device(chip)
        r = {}
        for n, fn, dt in cases:
            for k in (2, 6):
                c = jax.jit(chain(fn, k)).lower(sds((2048, 2048), dt, dev)).compile()
                r[f"{n} mul k={k} {jnp.dtype(dt).name} 2048"] = sum(o[4] for o in entry_ops(c.as_text()))
        res[chip] = {"cores_per_device": getattr(dev, "num_cores", 1), "cycles": r}
        print(chip, json.dumps(res[chip]), flush=True)
    json.dump(res, open(os.path.join(OUT, "vector_ops.json"), "w"), indent=1)


def xprefetch():
    """Which parameters the compiler prefetches across steps when no matmul reads them: per
    generation, the entry ops (name, opcode, cycles) and asynchronous copies of an unfused
    sum or max over every axis, axis 0 or axis 1 of f32 arrays of 4 to 64 MiB (and of
    bf16[4096,4096]), against a fused (x * x).sum() and an elementwise x * 2 of the same
    arrays. Writes corpus/xprefetch.json (vmem_assign.c cross_program_prefetch)."""
    cases = [("sum_all_4096x4096_f32", lambda x: x.sum(), (4096, 4096), F32),
             ("sum_ax1_4096x4096_f32", lambda x: x.sum(1), (4096, 4096), F32),
             ("sum_ax0_4096x4096_f32", lambda x: x.sum(0), (4096, 4096), F32),
             ("sum_all_2048x2048_f32", lambda x: x.sum(), (2048, 2048), F32),
             ("sum_ax1_2048x2048_f32", lambda x: x.sum(1), (2048, 2048), F32),
             ("max_all_4096x4096_f32", lambda x: x.max(), (4096, 4096), F32),
             ("sum_all_4096x4096_bf16", lambda x: x.sum(), (4096, 4096), BF),
             ("sumsq_all_4096x4096_f32", lambda x: (x * x).sum(), (4096, 4096), F32),
             ("scale_4096x4096_f32", lambda x: x * 2, (4096, 4096), F32),
             ("sum_all_1024x1024_f32", lambda x: x.sum(), (1024, 1024), F32),
             ("sum_ax1_1024x1024_f32", lambda x: x.sum(1), (1024, 1024), F32),
             ("scale_1024x1024_f32", lambda x: x * 2, (1024, 1024), F32),
             ("sum_ax1_8192x2048_f32", lambda x: x.sum(1), (8192, 2048), F32),
             ("sum_all_8192x2048_f32", lambda x: x.sum(), (8192, 2048), F32)]
    res = {}
    for chip in ("v5e", "v6e", "v4", "v5p"):
        dev = device(chip)
        for n, f, shape, dt in cases:
            t = jax.jit(f).lower(sds(shape, dt, dev)).compile().as_text()
            res[f"{chip} {n}"] = {"ops": [(o[0], o[1], o[4]) for o in entry_ops(t)], "copies": async_copies(t)}
            print(chip, n, res[f"{chip} {n}"], flush=True)
    json.dump(res, open(os.path.join(OUT, "xprefetch.json"), "w"), indent=1)


def row_broadcast():
    """A per-row statistic broadcast along the rows of an f32 [R, C] array (R * C = 2^23), as
    norms and softmax do: per generation, the cycles of x * 2 (the floor), x * s[:, None] and
    x * t[None, :] (a column statistic, for contrast), (x - s[:, None]) * t[:, None] and
    ((x - s[:, None]) * t[:, None]) + u[:, None], at C = 128 ... 2048. Writes
    corpus/row_broadcast.json (chip row_broadcast_cycles, layout.c stream_costs;
    docs/fidelity.md)."""
    n = 1 << 23
    forms = {"scale": lambda x, s, t, u: x * 2.0,  # the unused statistics are unused parameters
             "row1": lambda x, s, t, u: x * s[:, None],
             "col1": lambda x, s, t, u: x * t[None, :],
             "row2": lambda x, s, t, u: (x - s[:, None]) * t[:, None],
             "row3": lambda x, s, t, u: (x - s[:, None]) * t[:, None] + u[:, None]}
    res = {}
    for chip in TOPOLOGIES:
        dev = device(chip)
        r = {}
        for c in (128, 256, 512, 1024, 2048):
            rows = n // c
            for name, f in forms.items():
                shapes = [((rows, c), F32), ((rows,), F32), ((c,) if name == "col1" else (rows,), F32), ((rows,), F32)]
                args = [sds(sh, dt, dev) for sh, dt in shapes]
                comp = jax.jit(f).lower(*args).compile()
                r[f"{name} C={c}"] = sum(o[4] for o in entry_ops(comp.as_text()))
        res[chip] = {"cores_per_device": getattr(dev, "num_cores", 1), "cycles": r}
        print(chip, json.dumps(res[chip]), flush=True)
    json.dump(res, open(os.path.join(OUT, "row_broadcast.json"), "w"), indent=1)


def batched_products():
    """How the compiler spreads a batched matmul's products over the MXUs: per generation,
    the compiled entry ops (name, fusion kind, cycles) of tanh(einsum('bmk,bkn->bmn',
    tanh(x), tanh(y))) in bf16 (the matmul kernel reads and writes VMEM) with k = n = 64,
    b = 128 at m = 16, 32, 64 and b = 256 at m = 64. A cost flat in m (v6e) is products
    dealt whole to the MXUs; one that grows with m, each product split over them. Writes
    corpus/batched_products.json (chip mxu_batch_spread; docs/timing.md)."""
    res = {}
    for chip in TOPOLOGIES:
        dev = device(chip)
        r = {}
        for b, m in ((128, 16), (128, 32), (128, 64), (256, 64)):
            f = lambda x, y: jnp.tanh(jnp.einsum("bmk,bkn->bmn", jnp.tanh(x), jnp.tanh(y)))
            c = jax.jit(f).lower(sds((b, m, 64), BF, dev), sds((b, 64, 64), BF, dev)).compile()
            r[f"b{b}_m{m}_k64_n64"] = [[o[0], o[2], o[4]] for o in entry_ops(c.as_text())]
        res[chip] = r
        print(chip, json.dumps(r), flush=True)
    json.dump(res, open(os.path.join(OUT, "batched_products.json"), "w"), indent=1)


def narrow_results():
    """Which results pay the stream pass: per generation, the cycles of kernels over
    [4096,4096] writing 8-bit or pred results — (x * s).astype(f8e4m3fn) and .astype(int8)
    of bf16 x, x > 0 of bf16 and f32 x, x * 3 of int8 — and the lone converts bf16 ->
    f8e4m3fn / f8e5m2 / int8, f32 -> f8e4m3fn, f8e4m3fn -> bf16 / f32, int8 -> f32. Writes
    corpus/narrow_results.json (layout.c stream_costs: the pass for every result narrower
    than 32 bits; docs/timing.md)."""
    F8A, F8B, I8 = jnp.float8_e4m3fn, jnp.float8_e5m2, jnp.int8
    cases = {"scale_to_f8e4m3fn": (lambda x, s: (x * s).astype(F8A), BF),
             "scale_to_int8": (lambda x, s: (x * s).astype(I8), BF),
             "gt0_bf16": (lambda x, s: x > 0, BF), "gt0_f32": (lambda x, s: x > 0, F32),
             "mul3_int8": (lambda x, s: x * I8(3), I8),
             "cvt_bf16_f8e4m3fn": (lambda x, s: x.astype(F8A), BF),
             "cvt_bf16_f8e5m2": (lambda x, s: x.astype(F8B), BF),
             "cvt_bf16_int8": (lambda x, s: x.astype(I8), BF),
             "cvt_f32_f8e4m3fn": (lambda x, s: x.astype(F8A), F32),
             "cvt_f8e4m3fn_bf16": (lambda x, s: x.astype(BF), F8A),
             "cvt_f8e4m3fn_f32": (lambda x, s: x.astype(F32), F8A),
             "cvt_int8_f32": (lambda x, s: x.astype(F32), I8)}
    res = {}
    for chip in TOPOLOGIES:
        dev = device(chip)
        r = {}
        for name, (f, dt) in cases.items():
            c = jax.jit(f).lower(sds((4096, 4096), dt, dev), sds((), F32, dev)).compile()
            r[name] = [[o[0], o[2], o[4]] for o in entry_ops(c.as_text())]
        res[chip] = r
        print(chip, json.dumps(r), flush=True)
    json.dump(res, open(os.path.join(OUT, "narrow_results.json"), "w"), indent=1)


if __name__ == "__main__":
    os.makedirs(OUT, exist_ok=True)
    build()
    want = sys.argv[1:]
    # the probe families, each one JSON file of corpus/
    families = {"vector_dots": vector_dots, "eup": eup, "vector_ops": vector_ops, "xprefetch": xprefetch, "row_broadcast": row_broadcast,
                "batched_products": batched_products, "narrow_results": narrow_results}
    if len(want) == 1 and want[0] in families:
        families[want[0]]()
        sys.exit(0)
    if want and want[0].startswith("compiled="):  # compiled=CHIP NAME...: the compiled programs only
        compiled(want[1:], want[0].split("=", 1)[1])
        sys.exit(0)
    if (not want and not os.environ.get("FIDELITY_REVERSE") and not os.environ.get("FIDELITY_HLO_ONLY") and not (os.environ.get("FIDELITY_KEEP") and
            os.path.exists(os.path.join(OUT, "probes.json")))) or "probes" in want:
        probes()
    names = [p[0] for p in PROGS]
    assert len(names) == len(set(names)), "duplicate program names"
    order = PROGS[::-1] if os.environ.get("FIDELITY_REVERSE") else PROGS  # a second worker from the far end
    for name, cat, f, args in order:
        if want and not any(w in name for w in want):
            continue
        if os.path.exists(os.path.join(OUT, name + ".json")) and os.environ.get("FIDELITY_KEEP") and \
                not os.environ.get("FIDELITY_HLO_ONLY"):
            continue
        t0 = time.time()
        try:
            one(name, cat, f, args)
            print(f"{name}: {time.time() - t0:.1f} s", flush=True)
        except Exception as e:  # a program the compiler refuses is reported, not fatal
            print(f"{name}: FAILED {type(e).__name__}: {str(e)[:200]}", flush=True)
    print(len(PROGS), "programs")
