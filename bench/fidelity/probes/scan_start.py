#!/usr/bin/env python3
"""scan_start.py [--measure] [--tpusim BIN]: what the XLA TPU compiler charges for a scan's window
kernel (a reduce-window over the whole of a major dimension, padded by its length less one:
jnp.cumsum's lowering), its input and result in HBM, against tpusim on the same compiled program.

Cases: row-major f32[K, R, C] scanned along axis 0 with `maximum` (K = 16..128 at [., 8, 128];
R = 8..64 and C = 128..1024 at K = 64) and with `add` on five of them. --measure compiles each
for one device of v4, v5e, v5p and v6e (libtpu, compile-only, through libtpu.py) and writes the
compiled programs to data/scan_start/CASE.GEN.hlo.gz; without it the committed programs are
re-timed. Prints one JSON line per case and generation: the window fusion's estimated_cycles, its
window_config (output window, iteration bounds) and tpusim's cycles for the compiled program
(`tpusim run --mode timing`, one kernel), then per generation the least-squares line of the
compiler's cycles over the rows scanned (K) and the result's registers.

Finding (session 23, rwin; layout.c pool_window): the compiler runs the scan in the depthwise
window emitter a pool runs in (EmitDepthwiseAllBatchInLanes) and its figure does not depend on
the reduction (`add` and `maximum` cost the same cycles) nor on the window's taps: from HBM it is a
fixed part plus a part per row and per register. The fixed part is the pooling window kernel's
start: v5e 3,870 cycles at K = 16 less 16 rows of 16.9 is 3,600, against kernel_overhead_s +
window_start_cycles = 963 + 2,602 = 3,565; v5p 4,200 (1,181 + 3,024 = 4,205); v6e 4,200 (1,137 +
2,868 = 4,005). v4's is lower (about 1,160 against 2,495), not modelled apart. A scan whose
input is in VMEM (the v5e/v6e families programs' relayout copies write S(1)) costs the compiler
2,660-2,866 cycles whatever its size: below that start (timing.c stream_xbytes)."""
import argparse, glob, gzip, json, os, re, sys, tempfile
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import libtpu

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(HERE, "data", "scan_start")
GENS = ["v4", "v5e", "v5p", "v6e"]
CASES = [([k, 8, 128], "maximum") for k in (16, 32, 64, 128)] + \
        [([64, r, 128], "maximum") for r in (16, 32, 64)] + \
        [([64, 8, c], "maximum") for c in (256, 512, 1024)] + \
        [([16, 8, 128], "add"), ([64, 8, 128], "add"), ([64, 32, 128], "add"), ([64, 8, 512], "add")]


def scan_hlo(shape, op):
    n, s = shape[0], ",".join(map(str, shape))
    init = {"add": "0", "maximum": "-inf"}[op]
    return f"""HloModule p, entry_computation_layout={{(f32[{s}]{{2,1,0}})->f32[{s}]{{2,1,0}}}}
r {{
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT c = f32[] {op}(a, b)
}}
ENTRY e {{
  x = f32[{s}]{{2,1,0}} parameter(0)
  i = f32[] constant({init})
  ROOT w = f32[{s}]{{2,1,0}} reduce-window(x, i), window={{size={n}x1x1 pad={n - 1}_0x0_0x0_0}}, to_apply=r
}}
"""


def name(shape, op):
    return "scan_%s_%s" % ("x".join(map(str, shape)), op)


def window_op(text):
    entry = text[text.rfind("\nENTRY"):]
    for line in entry.split("\n"):
        if "kOutput" not in line or "window_config" not in line:
            continue
        wc = json.loads(re.search(r'"window_config":(\{[^}]*\})', line).group(1))
        return {"estimated_cycles": int(wc["estimated_cycles"]), "output_window": wc["output_window_bounds"],
                "iterations": wc["iteration_bounds"]}
    return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--measure", action="store_true")
    ap.add_argument("--tpusim", default=libtpu.TPUSIM)
    a = ap.parse_args()
    os.makedirs(DATA, exist_ok=True)
    d = tempfile.mkdtemp()
    rows = []
    for shape, op in CASES:
        for g in GENS:
            f = os.path.join(DATA, "%s.%s.hlo.gz" % (name(shape, op), g))
            if a.measure:
                _, text = libtpu.compile_hlo(scan_hlo(shape, op), libtpu.TOPO[g], d)
                if text is None:
                    continue
                with gzip.open(f, "wt") as w:
                    w.write(text)
            if not os.path.exists(f):
                continue
            text = gzip.open(f, "rt").read()
            w = window_op(text)
            if not w:
                continue
            sim = libtpu.tpusim_cycles(a.tpusim, text, libtpu.PRESET.get(g, g), d)
            r = dict(case=name(shape, op), gen=g, rows=shape[0], vregs=shape[0] * (shape[1] // 8) * (shape[2] // 128),
                     compiler=w["estimated_cycles"], tpusim=sim, output_window=w["output_window"],
                     iterations=w["iterations"])
            rows.append(r)
            print(json.dumps(r), flush=True)
    import numpy as np
    for g in GENS:
        rs = [r for r in rows if r["gen"] == g]
        if len(rs) < 3:
            continue
        A = np.array([[1.0, r["rows"], r["vregs"]] for r in rs])
        y = np.array([r["compiler"] for r in rs], dtype=float)
        c = np.linalg.lstsq(A, y, rcond=None)[0]
        ratio = sorted(r["tpusim"] / r["compiler"] for r in rs if r["tpusim"])
        print("%s: compiler ~ %.0f + %.2f per row + %.2f per register (n=%d); tpusim / compiler median %.3f [%.3f, %.3f]"
              % (g, c[0], c[1], c[2], len(rs), ratio[len(ratio) // 2], ratio[0], ratio[-1]))


if __name__ == "__main__":
    main()
