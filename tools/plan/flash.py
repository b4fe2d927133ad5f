#!/usr/bin/env python3
"""flash.py: the planner's attention as the Pallas flash-attention kernels themselves
(jax.experimental.pallas.ops.tpu.flash_attention: the forward with its residuals, and the
backward's dq and dkv kernels), instantiated per shape from fixtures lowered once.

    python3 tools/plan/flash.py gen      # (jax) lower the kernels, write tools/plan/flash/*.json

A pallas_call's Mosaic body is lowered by jaxlib, which the planner does not need. With the
blocks fixed (512 queries and keys, the library's and MaxText's default, as gen.py's kv_block)
the lowered body of each kernel depends on the element type and the head dimension only: the
batch, the heads and the sequence appear in the grid (iteration_bounds = b, h, S / 512,
S / 512) and in one constant, the index of the last key block (S / 512 - 1, where the kernel
writes its output). `gen` lowers each kernel at two shapes, checks that these are the only
differences, and stores the decoded line form (python/tpusim/pallas_decode.py) with the five
numbers as placeholders; `kernels` fills them in for the planner's shapes. The instances are
the kernels jaxlib would lower at those shapes (`gen` checks one at a third shape), so
tpusim times the planner's attention through src/mosaic, the kernel's own grid, DMAs and
vector work (docs/pallas.md), not a fusion standing for it."""
import json
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURES = os.path.join(HERE, "flash")
BLOCK = 512  # block_q = block_k_major = block_k (and the backward's), in rows of the sequence
LANES = 128  # the residuals l, m (and the dkv kernel's di) are broadcast over 128 lanes (MIN_BLOCK_SIZE)
DTYPES = {"bf16": "bfloat16", "f32": "float32"}
HEAD_DIMS = (64, 128, 256)
NAMES = ("fwd", "dq", "dkv")


def fixture_path(cd, hd):
    return os.path.join(FIXTURES, f"flash_{cd}_d{hd}.json")


def applies(cd, hd, S, causal):
    """True where the kernels can stand for the planner's attention: a fixture for the element
    type and head dimension, a causal mask, a sequence of whole blocks."""
    return causal and S >= BLOCK and S % BLOCK == 0 and os.path.exists(fixture_path(cd, hd))


_cache = {}


def kernels(cd, hd, b, h, S):
    """{"fwd" | "dq" | "dkv": {"mosaic": line form, "operands": [HLO types], "results": [HLO types]}}
    for batch b, h heads, sequence S (applies() must hold)."""
    key = (cd, hd)
    if key not in _cache:
        with open(fixture_path(cd, hd)) as f:
            _cache[key] = json.load(f)
    fx = _cache[key]
    nb = S // BLOCK
    val = {"B": b, "H": h, "NQ": nb, "NK": nb, "NK1": nb - 1, "S": S}
    out = {}
    for nm in NAMES:
        k = fx[nm]
        fill = lambda s: re.sub(r"@(\w+)@", lambda m: str(val[m.group(1)]), s)  # noqa: E731
        out[nm] = {"mosaic": fill(k["mosaic"]), "operands": [fill(t) for t in k["operands"]],
                   "results": [fill(t) for t in k["results"]]}
    return out


def backend_config(mosaic):
    """The custom-call's backend_config: the decoded kernel (tpusim reads "tpusim_mosaic"; the
    bytecode body is not kept, so libtpu cannot compile it)."""
    cfg = {"custom_call_config": {"serialization_format": 1, "needs_layout_passes": True}, "tpusim_mosaic": mosaic}
    return json.dumps(cfg, separators=(",", ":"))


def _call(g, out, k, args, names=None):
    """out = the kernel k (an entry of kernels()) on args; returns its results' names (names:
    those of a tuple's elements, else out.0, out.1, ...)."""
    res = k["results"]
    rt = res[0] if len(res) == 1 else "(" + ", ".join(res) + ")"
    g.e(f"{out} = {rt} custom-call({', '.join(args)}), custom_call_target=\"tpu_custom_call\", "
        f"backend_config={backend_config(k['mosaic'])}")
    if len(res) == 1:
        return [out]
    names = names or [f"{out}.{i}" for i in range(len(res))]
    for i, t in enumerate(res):
        g.e(f"{names[i]} = {t} get-tuple-element({out}), index={i}")
    return names


def _lanes(g, out, x, t):
    """x f32[b, h, S] broadcast over the minor dimension of type t, as the library does before
    its calls (l and m over 128 lanes, di over the dq kernel's key block)."""
    g.e(f"{out} = {t} broadcast({x}), dimensions={{0,1,2}}")


def emit_fwd(st, g):
    """The forward kernel on q4, k4, v4 [bm, S, h, hd] (transposed to the kernel's [bm, h, S,
    hd], as MaxText transposes before its attention kernel); returns (o4 [bm, h, S, hd], m, l)
    with m and l f32 [bm, h, S] (the kernel's residuals, lane 0 of 128, as the library keeps
    them)."""
    cd, bm, h, S, hd = st.cd, st.bm, st.h, st.S, st.hd
    ks = kernels(cd, hd, bm, h, S)
    t4 = f"{cd}[{bm},{h},{S},{hd}]"
    for nm in ("q", "k", "v"):
        g.e(f"fp.{nm} = {t4} transpose({nm}4), dimensions={{0,2,1,3}}")
    o, l128, m128 = _call(g, "fp.call", ks["fwd"], ["fp.q", "fp.k", "fp.v"])
    for nm, x in (("l", l128), ("m", m128)):
        g.e(f"fp.{nm}1 = f32[{bm},{h},{S},1] slice({x}), slice={{[0:{bm}], [0:{h}], [0:{S}], [0:1]}}")
        g.e(f"fp.{nm} = f32[{bm},{h},{S}] reshape(fp.{nm}1)")
    return o, "fp.m", "fp.l"


def emit_bwd(st, g, mx, sm, ctx):
    """The backward kernels (dq; dk and dv) from bq4, bk4, bv4 and the output's gradient g.ctx4
    [bm, S, h, hd], the forward's output ctx [Tm, A] and its m (mx) and l (sm) f32 [bm, h, S]:
    di = rowsum(o * do) in f32 as the library computes it; g.q4, g.k4, g.v4 [bm, h, S, hd]."""
    cd, bm, h, S, hd = st.cd, st.bm, st.h, st.S, st.hd
    ks = kernels(cd, hd, bm, h, S)
    t4, s4 = f"{cd}[{bm},{h},{S},{hd}]", f"{cd}[{bm},{S},{h},{hd}]"
    for nm, src in (("q", "bq4"), ("k", "bk4"), ("v", "bv4"), ("do", "g.ctx4")):
        g.e(f"fq.{nm} = {t4} transpose({src}), dimensions={{0,2,1,3}}")
    g.e(f"fq.o4 = {s4} reshape({ctx})")
    g.e(f"fq.o = {t4} transpose(fq.o4), dimensions={{0,2,1,3}}")
    f4, f3 = f"f32[{bm},{h},{S},{hd}]", f"f32[{bm},{h},{S}]"
    for nm in ("o", "do"):
        if cd != "f32":
            g.e(f"fq.{nm}f = {f4} convert(fq.{nm})")
    fo, fdo = ("fq.of", "fq.dof") if cd != "f32" else ("fq.o", "fq.do")
    g.e(f"fq.od = {f4} multiply({fo}, {fdo})")
    g.e("fq.z = f32[] constant(0)")
    g.e(f"fq.di = {f3} reduce(fq.od, fq.z), dimensions={{3}}, to_apply=add_f32")
    lm = {"l": sm, "m": mx}
    for kn, out, names in (("dq", "g.q4", None), ("dkv", "fq.dkv", ["g.k4", "g.v4"])):
        k = ks[kn]
        ops = k["operands"]  # q, k, v, l, m, do, di
        _lanes(g, f"fq.{kn}.l", lm["l"], ops[3])
        _lanes(g, f"fq.{kn}.m", lm["m"], ops[4])
        _lanes(g, f"fq.{kn}.di", "fq.di", ops[6])
        _call(g, out, k, ["fq.q", "fq.k", "fq.v", f"fq.{kn}.l", f"fq.{kn}.m", "fq.do", f"fq.{kn}.di"], names)


# --- gen (jax) ------------------------------------------------------------------------------

def _lower(b, h, S, hd, dt):
    """The decoded HLO of one training step's attention: flash_attention's forward and its vjp."""
    import jax
    import jax.numpy as jnp
    from jax.experimental import topologies
    from jax.experimental.pallas.ops.tpu import flash_attention as fa
    from jax.sharding import SingleDeviceSharding
    sys.path.insert(0, os.path.join(HERE, "..", "..", "python", "tpusim"))
    import pallas_decode
    dev = topologies.get_topology_desc(platform="tpu", topology_name="v5e:2x2").devices[0]
    st = jax.ShapeDtypeStruct((b, h, S, hd), getattr(jnp, dt), sharding=SingleDeviceSharding(dev))
    B = BLOCK
    bs = fa.BlockSizes(block_q=B, block_k_major=B, block_k=B, block_b=1, block_q_major_dkv=B, block_k_major_dkv=B,
                       block_k_dkv=B, block_q_dkv=B, block_k_major_dq=B, block_k_dq=B, block_q_dq=B)

    def f(q, k, v, g):
        o, vjp = jax.vjp(lambda q, k, v: fa.flash_attention(q, k, v, causal=True, block_sizes=bs), q, k, v)
        return o, vjp(g)
    return pallas_decode.decode_hlo(jax.jit(f).lower(st, st, st, st).as_text(dialect="hlo"))


_TYPE = re.compile(r"(\w+)\[([\d,]*)\](?:\{[\d,]*\})?")


def _calls(text):
    """{kernel name: (mosaic, operand types, result types)} of the decoded HLO."""
    out = {}
    for line in text.splitlines():
        if 'custom_call_target="tpu_custom_call"' not in line:
            continue
        i = line.index('"tpusim_mosaic":') + len('"tpusim_mosaic":')
        mosaic, _ = json.JSONDecoder().raw_decode(line[i:])
        name = re.search(r"sym_name=s:(\w+)", mosaic).group(1)
        head = line[:line.index("custom-call(")]
        res = [f"{t}[{d}]" for t, d in _TYPE.findall(head.split(" = ", 1)[1])]
        ops = line[line.index("operand_layout_constraints={"):]
        ops = ops[:ops.index("}}") + 1]
        opt = [f"{t}[{d}]" for t, d in _TYPE.findall(ops.split("={", 1)[1])]
        out[name] = (mosaic, opt, res)
    return out


def _short_locs(mosaic):
    """Source locations by file name and line (profile rows show no more of them)."""
    return re.sub(r"_loc=s:\S*/", "_loc=s:", mosaic)


def _template(a, b, sa, sb):
    """The line form with the shape's numbers as placeholders, from two lowerings a (shape sa)
    and b (sb) that must differ in exactly the grid and the last key block's index."""
    la, lb = a.split("\n"), b.split("\n")
    if len(la) != len(lb):
        raise SystemExit("flash.py gen: the kernel's body changes with the shape (line counts differ)")
    out = []
    for x, y in zip(la, lb):
        if x == y:
            out.append(x)
            continue
        ga = "iteration_bounds=a:%d,%d,%d,%d" % (sa[0], sa[1], sa[2] // BLOCK, sa[2] // BLOCK)
        gb = "iteration_bounds=a:%d,%d,%d,%d" % (sb[0], sb[1], sb[2] // BLOCK, sb[2] // BLOCK)
        ca, cb = "value=i:%d " % (sa[2] // BLOCK - 1), "value=i:%d " % (sb[2] // BLOCK - 1)
        if ga in x and x.replace(ga, "") == y.replace(gb, ""):
            out.append(x.replace(ga, "iteration_bounds=a:@B@,@H@,@NQ@,@NK@"))
        elif ca in x and x.replace(ca, "") == y.replace(cb, "") and x.count(ca) == 1:
            out.append(x.replace(ca, "value=i:@NK1@ "))
        else:
            raise SystemExit("flash.py gen: an unexpected difference between shapes:\n  %s\n  %s" % (x[:200], y[:200]))
    return "\n".join(out)


def _type_template(t, s):
    b, h, S = s
    m = re.fullmatch(r"(\w+)\[(\d+),(\d+),(\d+),(\d+)\]", t)
    if not m or (int(m.group(2)), int(m.group(3)), int(m.group(4))) != (b, h, S):
        raise SystemExit("flash.py gen: an operand not of [b, h, S, n]: " + t)
    return f"{m.group(1)}[@B@,@H@,@S@,{m.group(5)}]"


def gen():
    os.environ.setdefault("TPU_ACCELERATOR_TYPE", "v5litepod-4")
    os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")
    os.makedirs(FIXTURES, exist_ok=True)
    sa, sb, sc = (1, 2, 1024), (2, 3, 2048), (1, 4, 3072)
    for cd, dt in DTYPES.items():
        for hd in HEAD_DIMS:
            ka, kb = _calls(_lower(*sa, hd, dt)), _calls(_lower(*sb, hd, dt))
            fx = {"source": "jax.experimental.pallas.ops.tpu.flash_attention (jax %s), causal, blocks of %d; "
                            "tools/plan/flash.py gen" % (__import__("jax").__version__, BLOCK)}
            names = {"_flash_attention_kernel": "fwd", "_flash_attention_dq_kernel": "dq",
                     "_flash_attention_dkv_kernel": "dkv"}
            for kn, nm in names.items():
                (ma, oa, ra), (mb, _, _) = ka[kn], kb[kn]
                fx[nm] = {"mosaic": _template(_short_locs(ma), _short_locs(mb), sa, sb),
                          "operands": [_type_template(t, sa) for t in oa],
                          "results": [_type_template(t, sa) for t in ra]}
            path = fixture_path(cd, hd)
            with open(path, "w") as f:
                json.dump(fx, f, indent=0)
            # A third shape: the instance must be what jaxlib lowers there.
            kc = _calls(_lower(*sc, hd, dt))
            inst = kernels(cd, hd, *sc)
            for kn, nm in names.items():
                if _short_locs(kc[kn][0]) != inst[nm]["mosaic"] or kc[kn][1] != inst[nm]["operands"]:
                    raise SystemExit(f"flash.py gen: {nm} at {sc} is not the template's instance")
            print("wrote", path, os.path.getsize(path), "bytes")


if __name__ == "__main__":
    if sys.argv[1:] == ["gen"]:
        gen()
    else:
        sys.stderr.write(__doc__)
        sys.exit(2)
