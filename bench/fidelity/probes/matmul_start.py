#!/usr/bin/env python3
"""matmul_start.py [GENS] [TPUSIM]: the probe behind the chip fields matmul_base_s,
matmul_overhead_s and matmul_write_s (docs/timing.md, MXU kernel start). Needs libtpu.

Compiles small bf16 dots with the XLA TPU compiler (compile-only, gen.py's topologies) in
forms that leave the MXU's operands and the result in HBM or in VMEM: x @ w, (x @ w) + (x @ w2),
sum(gelu(x @ w) * (x @ w2)), (a @ w1, b @ w2) and three such pairs, at 7 shapes from
[8,256] x [256,768] to [256,256] x [256,256]. Each matmul kernel of the compiled programs
(a kOutput fusion with one dot or convolution without a window) is classed by where the
MXU's operands come from (any from HBM, not through a cross-program prefetch), whether it
reads any other operand from HBM, and whether its result goes to HBM; then tpusim times the
compiled program on the preset with the three fields removed, and the script prints, per
class, the median of the compiler's cycles less tpusim's. Those medians are the fields (in
cycles at the compiler's clock): every kernel's base, the extra of an MXU operand from HBM,
the extra of a result written to HBM."""
import glob, json, os, re, statistics, subprocess, sys, tempfile

os.environ.setdefault("TPU_ACCELERATOR_TYPE", "v5litepod-4")
import jax
import jax.numpy as jnp
from jax.experimental import topologies
from jax.sharding import SingleDeviceSharding

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
from compare import computations  # noqa: E402  (the HLO text splitter)
ROOT = os.path.normpath(os.path.join(HERE, "..", "..", ".."))
TOP = {"v4": "v4:2x2x1", "v5e": "v5e:2x2", "v5p": "v5p:2x2x1", "v6e": "v6e:2x2"}
CLOCK = {"v4": 1.05e9, "v5e": 1.5e9, "v5p": 1.75e9, "v6e": 1.75e9}
FIELDS = ("matmul_base_s", "matmul_overhead_s", "matmul_write_s")
SHAPES = [(8, 256, 768), (128, 128, 128), (64, 512, 512), (256, 256, 256), (16, 128, 1024), (32, 384, 256),
          (8, 1024, 128)]


def programs():
    for M, K, N in SHAPES:
        mk, kn = (M, K), (K, N)
        yield f"single_{M}x{K}x{N}", lambda x, w: x @ w, [mk, kn]
        yield f"twoin_{M}x{K}x{N}", lambda x, w, w2: (x @ w) + (x @ w2), [mk, kn, kn]
        yield f"gelu_{M}x{K}x{N}", lambda x, w, w2: jnp.sum(jax.nn.gelu(x @ w) * (x @ w2), axis=1), [mk, kn, kn]
        yield f"pair_{M}x{K}x{N}", lambda a, w1, b, w2: (a @ w1, b @ w2), [mk, kn, mk, kn]
        yield f"pair3_{M}x{K}x{N}", lambda a, w1, b, w2, c, w3: (a @ w1, b @ w2, c @ w3), [mk, kn] * 3


INSTR = re.compile(r"\s*(?:ROOT )?%([\w.\-]+) = (.*?) ([a-z][a-z0-9-]*)\((.*)$")


def mxu_params(comps, name):
    """The parameter numbers of fused computation `name` that reach its dot's or
    convolution's operands (through bitcasts, copies and the kLoop fusions around them);
    None when it has no such op, several, or a windowed convolution."""
    lines = comps.get(name, [])
    defs = {}
    for l in lines:
        m = INSTR.match(l)
        if m:
            defs[m.group(1)] = (m.group(3), re.findall(r"%([\w.\-]+)", m.group(4).split(")", 1)[0]), l)
    dots = [n for n, (op, _, l) in defs.items() if op in ("dot", "convolution")]
    if len(dots) != 1 or "window=" in defs[dots[0]][2]:
        return None
    out, todo = set(), list(defs[dots[0]][1])
    while todo:
        n = todo.pop()
        if n not in defs:
            continue
        op, args, l = defs[n]
        if op == "parameter":
            out.add(int(re.search(r"parameter\((\d+)\)", l).group(1)))
        elif op in ("bitcast", "copy", "fusion", "convert", "reshape", "transpose"):
            todo.extend(args)
    return out


def kernels(txt):
    """{name: (mxu_from_hbm, other_from_hbm, result_to_hbm, estimated_cycles)} for the entry's
    matmul kernels."""
    comps = computations(txt)
    entry = txt[txt.rfind("\nENTRY"):]
    shape, res = {}, {}
    for l in entry.splitlines():
        m = INSTR.match(l)
        if not m:
            continue
        shape[m.group(1)] = m.group(2)
        c = re.search(r'"estimated_cycles":"(\d+)"', l)
        calls = re.search(r"calls=%([\w.\-]+)", l)
        if not c or not calls or "kind=kOutput" not in l:
            continue
        mp = mxu_params(comps, calls.group(1))
        if mp is None:
            continue
        args = re.findall(r"%([\w.\-]+)", m.group(4).split(")", 1)[0])
        hbm = [not re.search(r"S\([13]\)", shape.get(a, "")) for a in args]
        res[m.group(1)] = (any(hbm[i] for i in mp if i < len(hbm)),
                           any(h for i, h in enumerate(hbm) if i not in mp),
                           not re.search(r"S\([13]\)", m.group(2)), int(c.group(1)))
    return res


def main():
    gens = sys.argv[1].split(",") if len(sys.argv) > 1 else list(TOP)
    tpusim = sys.argv[2] if len(sys.argv) > 2 else os.path.join(ROOT, "build", "tpusim")
    td = tempfile.mkdtemp(prefix="matmul_start_")
    groups = {}
    for gen in gens:
        dev = topologies.get_topology_desc(platform="tpu", topology_name=TOP[gen]).devices[0]
        chip = json.load(open(os.path.join(ROOT, "chips", gen + ".json")))
        for f in FIELDS:
            chip.pop(f, None)
        cpath = os.path.join(td, gen + ".json")
        json.dump(chip, open(cpath, "w"))
        for name, f, shapes in programs():
            spec = [jax.ShapeDtypeStruct(s, jnp.bfloat16, sharding=SingleDeviceSharding(dev)) for s in shapes]
            txt = jax.jit(f).lower(*spec).compile().as_text()
            ks = kernels(txt)
            if not ks:
                continue
            hlo, rep = os.path.join(td, f"{name}.{gen}.hlo"), os.path.join(td, "r.json")
            open(hlo, "w").write(txt)
            p = subprocess.run([tpusim, "run", hlo, "--mode", "timing", "--report", rep, "--quiet", "--chip",
                                cpath + (":core" if gen == "v4" else "")], capture_output=True, text=True)
            if p.returncode:
                print(f"{name} {gen}: {p.stderr.strip()[-200:]}")
                continue
            for o in json.load(open(rep))["ops"]:
                if o["name"] in ks:
                    mx, other, wr, cc = ks[o["name"]]
                    groups.setdefault((gen, mx, other, wr), []).append(cc - o["seconds"] * CLOCK[gen])
    print("gen  MXU operand from HBM, other operand from HBM, result to HBM: kernels, median and range of the "
          "compiler's cycles less tpusim's (without the matmul fields)")
    for k in sorted(groups):
        v = groups[k]
        print(f"{k[0]:4s} {str(k[1]):5s} {str(k[2]):5s} {str(k[3]):5s} n={len(v):3d}  {statistics.median(v):7.0f}  "
              f"({min(v):.0f} .. {max(v):.0f})")


if __name__ == "__main__":
    main()
