#!/usr/bin/env python3
"""vmem_update.py [CHIPS] [ONLY] (session 26, tail; needs libtpu, compile-only): optimizer
updates of donated parameter trees whose arrays the XLA TPU compiler copies into VMEM within
the step (copy-start / copy-done, or slice-start / slice-done pieces of at most 4 MiB joined by
a ConcatBitcast custom-call, all in memory space S(1)), updates there by one loop fusion per
array writing its results into S(1), and copies back to HBM with copy-starts. Shapes and trees
off the families corpus. Per compiled fusion (one JSON line): its estimated_cycles, how many of
its operands come from such copies (`in_s1`: copy-done or ConcatBitcast of slice-dones, through
bitcasts), how many of its result leaves lie in S(1) (`out_s1`) of how many, its operand and
result bytes, and tpusim's cycles for the op of the same name (`tpusim run --mode timing` on the
compiled program) at the commit that wrote them (TPUSIM_BEFORE=binary adds `before`, with its chips from TPUSIM_BEFORE_CHIPS=folder), and, for
each fusion writing every result into S(1), tpusim's cycles with the chip's vmem_write_cost
set to 1e-6 (the least it takes) and to 1 (`w0`, `w1`) and the cost that matches the compiler's figure,
`w` = (compiler - w0) / (w1 - w0): the share of an HBM write the compiler charges a write
into VMEM (chips/*.json vmem_write_cost: the median of `w` per chip over the rows where
tpusim's kernel lasts its transfers, `linear`: at 0.5 its cycles are the midpoint; where its
vector work is longer, as in v6e's adam updates, the interpolation does not hold).
Writes data/vmem_update.jsonl when run as `... > data/vmem_update.jsonl`."""
import json, os, re, subprocess, sys, tempfile
os.environ.setdefault("TPU_ACCELERATOR_TYPE", "v5litepod-4")
os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path = [p for p in sys.path if os.path.abspath(p or ".") != HERE]  # libtpu.py here is not libtpu
sys.path.insert(0, os.path.dirname(HERE))
import gen, jax, jax.numpy as jnp
F32 = jnp.float32
TPUSIM = os.environ.get("TPUSIM", os.path.join(HERE, "..", "..", "..", "build", "tpusim"))
PRESET = {"v4": "v4:core"}


def momentum(ps, ms, gs):
    out = []
    for p, m, g in zip(ps, ms, gs):
        m2 = 0.9 * m + g
        out.append((p - 1e-2 * (g + 0.9 * m2), m2))
    return out


def adam(ps, ms, vs, gs):
    out = []
    for p, m, v, g in zip(ps, ms, vs, gs):
        m2, v2 = 0.9 * m + 0.1 * g, 0.999 * v + 0.001 * g * g
        out.append((p - 1e-3 * m2 / (jnp.sqrt(v2) + 1e-8), m2, v2))
    return out


TREES = {"a": [(2304, 1536)], "b": [(5120, 896), (1536, 1280)], "c": [(6144, 640), (2560, 2048), (896, 384)],
         "d": [(3584, 1152), (12288, 128)], "e": [(1024, 1024), (3072, 1536), (2048, 2560)],
         "f": [(512, 2048), (4096, 1024), (1792, 3072)], "g": [(768, 768), (2816, 2048), (5632, 768)]}
CASES = []
for t, shapes in TREES.items():
    CASES.append((f"momentum_{t}", momentum, 3, shapes))
    CASES.append((f"adam_{t}", adam, 4, shapes))

DT = {"f32": 4, "bf16": 2, "s32": 4, "u32": 4, "pred": 1, "s8": 1}


def shape_bytes(s):
    n = 0
    for dt, dims in re.findall(r"(\w+)\[([\d,]*)\]", s):
        k = DT.get(dt, 4)
        for x in filter(None, dims.split(",")):
            k *= int(x)
        n += k
    return n


def fusions(txt):
    """Entry loop fusions: name -> (cycles, operands from S(1) copies, result leaves in S(1), leaves,
    operand bytes, result bytes)."""
    entry = txt[txt.rfind("\nENTRY"):]
    defs, out = {}, {}
    for line in entry.splitlines():
        m = re.match(r"\s*(?:ROOT )?%(\S+) = (.*?) ([a-z][\w-]*)\((.*)$", line)
        if not m:
            continue
        name, shape, op, rest = m.groups()
        args = re.findall(r"%([\w.\-]+)", rest.split(")")[0])
        defs[name] = (shape, op, args, line)
    def copied(a, hops=0):
        shape, op, args, line = defs.get(a, ("", "", [], ""))
        if op == "bitcast" and args and hops < 8:
            return copied(args[0], hops + 1)
        if "S(1)" not in shape.split(" ")[0]:
            return False
        if op == "copy-done":
            return True
        return op == "custom-call" and "ConcatBitcast" in line and all(defs.get(x, ("", ""))[1] == "slice-done" for x in args)
    for name, (shape, op, args, line) in defs.items():
        if op != "fusion" or "kind=kLoop" not in line:
            continue
        e = re.search(r'"estimated_cycles":"(\d+)"', line)
        leaves = re.findall(r"\w+\[[\d,]*\]\{[^}]*\}", shape)
        out[name] = dict(cycles=int(e.group(1)) if e else None, in_s1=sum(copied(a) for a in args), nin=len(args),
                         out_s1=sum("S(1)" in l for l in leaves), nout=len(leaves),
                         in_bytes=sum(shape_bytes(defs.get(a, ("",))[0]) for a in args), out_bytes=shape_bytes(shape))
    return out


def chip_file(chip, w, d):
    """chips/CHIP.json with vmem_write_cost set to w, in folder d."""
    j = json.load(open(os.path.join(HERE, "..", "..", "..", "chips", chip + ".json")))
    j["vmem_write_cost"] = {"value": w, "source": "XLA", "status": "derived", "note": "vmem_update.py"}
    path = os.path.join(d, f"{chip}_w{w}.json")
    json.dump(j, open(path, "w"))
    return path


def tpusim_ops(binary, path, chip, d, chips=None):
    rep = os.path.join(d, "r.json")
    env = dict(os.environ, TPUSIM_CACHE="off", **({"TPUSIM_CHIPS": chips} if chips else {}))
    chip = chip if chip.endswith(".json") else PRESET.get(chip, chip)
    r = subprocess.run([binary, "run", path, "--mode", "timing", "--chip", chip, "--report", rep,
                        "--quiet"], capture_output=True, text=True, env=env)
    return {o["name"]: o["cycles"] for o in json.load(open(rep))["ops"]} if r.returncode == 0 else {}


def main():
    chips = sys.argv[1].split(",") if len(sys.argv) > 1 else ["v5e", "v6e", "v5p", "v4"]
    only = sys.argv[2].split(",") if len(sys.argv) > 2 else None
    commit = subprocess.run(["git", "-C", HERE, "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    with tempfile.TemporaryDirectory() as d:
        for name, f, nt, shapes in CASES:
            if only and not any(name.startswith(o) for o in only):
                continue
            for chip in chips:  # nt trees, all but the gradients donated
                jf = jax.jit(f, donate_argnums=tuple(range(nt - 1)))
                txt = jf.lower(*[[gen.sds(s, F32, gen.device(chip)) for s in shapes] for _ in range(nt)]).compile().as_text()
                path = os.path.join(d, f"{name}.{chip}.hlo")
                open(path, "w").write(txt)
                tops = tpusim_ops(TPUSIM, path, chip, d)
                bops = tpusim_ops(os.environ["TPUSIM_BEFORE"], path, chip, d, os.environ.get("TPUSIM_BEFORE_CHIPS")) \
                    if os.environ.get("TPUSIM_BEFORE") else {}
                w0 = tpusim_ops(TPUSIM, path, chip_file(chip, 1e-6, d), d) if chip != "v4" else {}
                w1 = tpusim_ops(TPUSIM, path, chip_file(chip, 1.0, d), d) if chip != "v4" else {}
                wh = tpusim_ops(TPUSIM, path, chip_file(chip, 0.5, d), d) if chip != "v4" else {}
                for fn, v in fusions(txt).items():
                    row = dict(case=name, chip=chip, fusion=fn, compiler=v["cycles"], tpusim=tops.get(fn), **{
                        k: v[k] for k in ("in_s1", "nin", "out_s1", "nout", "in_bytes", "out_bytes")}, tpusim_commit=commit)
                    if bops:
                        row["before"] = bops.get(fn)
                    a, b = w0.get(fn), w1.get(fn)
                    if v["out_s1"] == v["nout"] and a is not None and b is not None and b > a and v["cycles"]:
                        # linear: tpusim's kernel lasts its transfers here (at 0.5 the midpoint),
                        # not its vector work, so that w is the write's share
                        row.update(w0=a, w1=b, w=round((v["cycles"] - a) / (b - a), 3),
                                   linear=abs(wh.get(fn, 0) - (a + b) / 2) <= 0.02 * (b - a))
                    print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
