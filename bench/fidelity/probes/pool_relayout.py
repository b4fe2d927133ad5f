#!/usr/bin/env python3
"""pool_relayout.py probe GEN SEED N | fit: libtpu probes of a pooling window kernel reading its
input from HBM (session 20, pool), named for the gap they started from: the XLA TPU compiler
runs a pool of a row-major NHWC parameter as one kOutput window fusion that copies the operand
into {3,0,2,1} (the batch in the sublanes) as it reads it, and costs it more than its streamed
bytes (docs/compiler-fusion.md, known gap (1)); the same kernel with its input already {3,0,2,1}
does too, by the factor fit derives. probe compiles N random max / sum pools (f32 and bf16 [8..32, 28..112, 28..112,
128..512], 12-120 MB, windows 2-5, strides 1-3, VALID) with /work/shared/tools/tpu_compile.py for one
device of GEN, keeps the kOutput window fusions, and appends one JSON line per pool to
data/pool_relayout.jsonl: the fusion's estimated_cycles, its window_config bounds, whether its
fused computation holds that copy (copy_in; with the parameter's layout left to the compiler it
never does: the compiler lays the parameter out {3,0,2,1} itself), and tpusim's cycles for the
same compiled kernel on the preset without window_hbm_factor (`tpusim run --mode timing` of the
compiled module, as compare.py --compiled times it). fit derives chips/*.json window_hbm_factor."""
import json, os, random, re, statistics, subprocess, sys, tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from libtpu import TOPO, TPUSIM, compile_hlo  # noqa: E402

LO = float(os.environ.get("POOL_MIN_BYTES", 12e6))  # the input's least bytes (40e6 reads HBM more often)
NEGATE = os.environ.get("POOL_NEGATE") == "1"  # the input negated too: the window reads HBM
DTYPES = os.environ.get("POOL_DTYPES", "f32,bf16").split(",")
HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "pool_relayout.jsonl")


def pool_hlo(k, n, h, c, dt, win, st, negate=False):
    """The pool's module; negate: the input also negated into a second result, which keeps the
    compiler from prefetching it into VMEM (the window reads HBM), as pool_window.py does."""
    ho = (h - win) // st + 1
    init, op = ("-inf", "maximum") if k == "max" else ("0", "add")
    tail = (f"  z = {dt}[{n},{h},{h},{c}] negate(x)\n  ROOT t = ({dt}[{n},{ho},{ho},{c}], {dt}[{n},{h},{h},{c}]) tuple(y, z)\n"
            if negate else "")
    return (f"HloModule probe\n\nr {{\n  a = {dt}[] parameter(0)\n  b = {dt}[] parameter(1)\n  ROOT c = {dt}[] {op}(a, b)\n}}\n\n"
            f"ENTRY main {{\n  x = {dt}[{n},{h},{h},{c}] parameter(0)\n  i = {dt}[] constant({init})\n"
            f"  {'' if negate else 'ROOT '}y = {dt}[{n},{ho},{ho},{c}] reduce-window(x, i), window={{size=1x{win}x{win}x1 stride=1x{st}x{st}x1}}, to_apply=r\n"
            f"{tail}}}\n")


def window_fusion(t):
    """(name, estimated_cycles, window_config, fused copy?) of the entry's kOutput window fusion."""
    ent = t[t.rfind("\nENTRY"):]
    m = re.search(r'\n\s*(?:ROOT )?%(\S+) = [^\n]*kind=kOutput, calls=%([\w.\-]+)[^\n]*"window_config":(\{[^}]*\})', ent)
    if not m:
        return None
    body = re.search(r"\n%" + re.escape(m.group(2)) + r" [^\n]*\{\n(.*?)\n\}", t, re.S)
    wc = json.loads(m.group(3))
    return m.group(1), int(wc["estimated_cycles"]), wc, bool(body and " copy(" in body.group(1))


def tpusim_ops_without_factor(text, gen):
    """tpusim's kernels for `text` on generation gen's preset without window_hbm_factor (what
    fit measures the compiler against), v4 as one TensorCore as compare.py runs it."""
    chip = json.load(open(os.path.join(HERE, "..", "..", "..", "chips", gen + ".json")))
    chip.pop("window_hbm_factor", None)
    with tempfile.TemporaryDirectory() as d:
        cf, src, rep = os.path.join(d, gen + ".json"), os.path.join(d, "p.hlo"), os.path.join(d, "r.json")
        json.dump(chip, open(cf, "w"))
        open(src, "w").write(text)
        subprocess.run([TPUSIM, "run", src, "--mode", "timing", "--chip", cf + (":core" if gen == "v4" else ""),
                        "--report", rep, "--quiet"], check=True, env=dict(os.environ, TPUSIM_CACHE="off"))
        return [(o["name"], o["kind"], o["cycles"]) for o in json.load(open(rep))["ops"]]


def probe(gen, seed, n):
    random.seed(seed)
    done = 0
    with tempfile.TemporaryDirectory() as d, open(DATA, "a") as out:
        while done < n:
            k, dt = random.choice(["max", "sum"]), random.choice(DTYPES)
            b, h = random.choice([8, 16, 24, 32]), random.randint(28, 112)
            c, win, st = random.choice([128, 256, 384, 512]), random.randint(2, 5), random.randint(1, 3)
            if not LO <= b * h * h * c * (4 if dt == "f32" else 2) <= 120e6:
                continue
            text = pool_hlo(k, b, h, c, dt, win, st, NEGATE)
            summ, t = compile_hlo(text, TOPO[gen], d)
            if not t:
                continue
            wf = window_fusion(t)
            xpf = "cross_program_prefetch" in t
            ops = tpusim_ops_without_factor(t, gen)
            row = dict(gen=gen, cfg=[k, b, h, h, c, dt, win, st], kernels=len(ops), xprefetch=xpf, negate=NEGATE)
            if wf:
                name, est, wc, cp = wf
                row.update(fusion=name, compiler=est, copy_in=cp, in_bounds=wc["input_window_bounds"],
                           out_bounds=wc["output_window_bounds"], iters=wc["iteration_bounds"],
                           tpusim=next((c_ for nm, _, c_ in ops if nm == name), None))
            print(json.dumps(row), flush=True)
            out.write(json.dumps(row) + "\n")
            done += 1


def fit():
    """Per generation: window_hbm_factor, the median over the f32 pools whose window reads HBM
    (no cross-program prefetch) of the compiler's cycles beyond tpusim's (timed without the
    field), less the compiler's own halo re-reads (its input windows, window_config
    input_window_bounds x iteration_bounds, beyond the input once), over the transfers' stream
    time (input and result at the chip's stream rate) plus one; bf16 pools and the halo shown
    apart (not modelled)."""
    rows = [json.loads(l) for l in open(DATA)]
    for g in sorted({r["gen"] for r in rows}):
        c = json.load(open(os.path.join(HERE, "..", "..", "..", "chips", g + ".json")))
        bpc = c["hbm_bw"]["value"] * c["hbm_efficiency"]["value"] / c["clock_hz"]["value"]
        per = {"f32": [], "bf16": []}
        for r in rows:
            if r["gen"] != g or not r.get("compiler") or not r.get("tpusim") or r["xprefetch"]:
                continue
            k, b, h, w, ch, dt, win, st = r["cfg"]
            es, ho = (4 if dt == "f32" else 2), (h - win) // st + 1
            ib, it = [int(x) for x in r["in_bounds"]], [int(x) for x in r["iters"]]
            halo = it[2] * ib[0] * it[3] * ib[1] / (h * w)
            inb, outb = b * h * w * ch * es, b * ho * ho * ch * es
            per[dt].append(1 + (r["compiler"] - r["tpusim"] - (halo - 1) * inb / bpc) / ((inb + outb) / bpc))
        for dt, v in per.items():
            if v:
                print(f"{g} {dt}: n={len(v)} factor median {statistics.median(v):.3f} "
                      f"(min {min(v):.2f}, max {max(v):.2f})")


if __name__ == "__main__":
    if sys.argv[1] == "probe":
        probe(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
    else:
        fit()
