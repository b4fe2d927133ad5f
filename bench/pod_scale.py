#!/usr/bin/env python3
"""pod_scale.py: how tpusim's pod timing scales, in host time and in what it predicts.

1. Host time (the SPMD symmetry: one program, N positions): a 540B-parameter transformer
   step (bench/pod_transformer.py, PaLM's shape) on 6,144 chips in --mode timing, against
   the same model's step on 8 chips measured in the same run; prints both and the ratio.
2. Weak scaling, data parallel: a fixed per-chip batch of a 1B-class transformer on 8 ...
   4,096 chips (FSDP over all chips, no tensor parallelism); prints step time, MFU and the
   ICI share per size, and with --plot FILE.png draws them (matplotlib).

    python3 bench/pod_scale.py --tpusim build/tpusim [--chip v5p] [--plot docs/pod_weak_scaling.png]
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def gen(path, **kw):
    args = [sys.executable, os.path.join(HERE, "pod_transformer.py"), "-o", path]
    for k, v in kw.items():
        args += ["--" + k.replace("_", "-"), str(v)]
    subprocess.run(args, check=True)


def timing(tpusim, path, chip, topology=None):
    cmd = [tpusim, "run", path, "--mode", "timing", "--chip", chip]
    if topology:
        cmd += ["--topology", topology]
    t0 = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, text=True)
    host = time.perf_counter() - t0
    if r.returncode != 0:
        sys.exit(f"tpusim failed on {path}: {r.stderr.strip()}")
    out = r.stdout
    step = float(re.search(r"^step time: .*\((\d+) cycles at ([0-9.]+) GHz\)", out, re.M).group(1)) / (
        float(re.search(r"cycles at ([0-9.]+) GHz", out).group(1)) * 1e9)
    mfu = float(re.search(r"MFU: ([0-9.]+)%", out).group(1))
    m = re.search(r"waiting on ICI ([0-9.]+)%", out)
    ici = float(m.group(1)) if m else 0.0
    return host, step, mfu, ici


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tpusim", default="build/tpusim")
    ap.add_argument("--chip", default="v5p")
    ap.add_argument("--plot", help="write the weak-scaling plot here (PNG)")
    ap.add_argument("--max-chips", type=int, default=4096)
    a = ap.parse_args()
    tmp = tempfile.mkdtemp()
    palm = dict(layers=118, d_model=18432, heads=48, head_dim=256, ffn=73728, seq=2048)
    p8 = os.path.join(tmp, "palm8.hlo")
    p6144 = os.path.join(tmp, "palm6144.hlo")
    gen(p8, batch=16, dp=2, tp=4, **palm)
    gen(p6144, batch=2048, dp=512, tp=12, **palm)
    h8, s8, m8, _ = timing(a.tpusim, p8, a.chip)
    h6, s6, m6, i6 = timing(a.tpusim, p6144, a.chip)
    print(f"540B transformer step, --mode timing on {a.chip}:")
    print(f"  6,144 chips (dp 512 x tp 12): host {h6:.3f} s; predicted step {s6:.3f} s, MFU {m6:.1f}%, waiting on ICI {i6:.1f}%")
    print(f"      8 chips (dp 2 x tp 4):    host {h8:.3f} s; predicted step {s8:.3f} s, MFU {m8:.1f}%")
    print(f"  host-time ratio 6,144 / 8 chips: {h6 / h8:.2f}x")
    print()
    print(f"weak scaling, data parallel (FSDP), 1.3B-class model, 8 sequences of 2048 per chip, {a.chip}:")
    print(f"  {'chips':>6} {'step ms':>10} {'MFU %':>7} {'ICI wait %':>10} {'host s':>7}")
    rows = []
    n = 8
    while n <= a.max_chips:
        path = os.path.join(tmp, f"dp{n}.hlo")
        gen(path, layers=24, d_model=2048, heads=16, head_dim=128, ffn=8192, seq=2048, batch=8 * n, dp=n, tp=1)
        h, s, m, i = timing(a.tpusim, path, a.chip)
        rows.append((n, s, m, i))
        print(f"  {n:>6} {s * 1e3:>10.2f} {m:>7.1f} {i:>10.1f} {h:>7.3f}")
        n *= 2
    if a.plot:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        fig, ax = plt.subplots(figsize=(6, 3.6))
        xs = [r[0] for r in rows]
        ax.plot(xs, [r[2] for r in rows], "o-", label="MFU")
        ax.plot(xs, [r[3] for r in rows], "s--", label="waiting on ICI")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("chips (data parallel, fixed batch per chip)")
        ax.set_ylabel("% of the step")
        ax.set_title(f"tpusim weak scaling on {a.chip} (1.3B-class model, FSDP)")
        ax.grid(True, alpha=0.3)
        ax.legend()
        fig.tight_layout()
        fig.savefig(a.plot, dpi=120)
        print(f"plot: {a.plot}")


if __name__ == "__main__":
    main()
