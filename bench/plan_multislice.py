#!/usr/bin/env python3
"""plan_multislice.py: MaxText's published multi-slice training throughput on TPU v5e (the
table of configs/v5e/README.md: the 16B, 32B, 64B and 128B models on 1, 2, 4, 8, 16 and 32
v5e-256 slices joined by the data-center network, data parallel across the slices, the same
per-device batch and sharding in each slice) planned by `tpusim plan --slices K` on the
published configuration, predicted against published TFLOP/s per chip.

Two figures per row: the absolute error (which the single-slice rows of plan_maxtext.py
already show: per-chip compute on v5e), and the **scaling**: TFLOP/s per chip on K slices over
that on one slice, predicted against published, which isolates what the DCN model adds. Rows
(model, K > 1) are split tune/test by a hash of the row name (sha1, even first byte: tune);
nothing is fitted to either half, and the test half is reported first.

    python3 bench/plan_multislice.py --tpusim build/tpusim [--markdown] [--only 16b]
"""
import argparse
import hashlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tools", "plan"))
import gen  # noqa: E402
import plan as P  # noqa: E402
sys.path.insert(0, HERE)
import plan_maxtext as MX  # noqa: E402  (each row's published program: MX.row_model)

# row, model file (unused: the row's program is plan_maxtext.py's, MX.row_model, the scripts and
# base.yml of 76bd53b0 that published the table), per-device batch, tensor, remat policy, and the
# published TFLOP/s per chip on 1, 2, 4, 8, 16, 32 slices (configs/v5e/README.md).
SLICES = [1, 2, 4, 8, 16, 32]
ROWS = [
    ("maxtext_16b", "maxtext_16b", 6, 1, "full", [120, 117, 117, 115, 111, 108]),
    ("maxtext_32b_v5e", "maxtext_32b", 4, 1, "full", [132, 128, 126, 125, 123, 119]),
    ("maxtext_64b_v5e", "maxtext_64b", 2, 1, "full", [118, 112, 110, 108, 105, 99]),
    ("maxtext_128b_v5e", "maxtext_128b", 1, 16, "full", [110, 110, 108, 104, 100, 91]),
]
N = 256  # chips per v5e-256 slice


def split(name):
    return "tune" if hashlib.sha1(name.encode()).digest()[0] % 2 == 0 else "test"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tpusim", default=os.path.join(ROOT, "build", "tpusim"))
    ap.add_argument("--markdown", action="store_true")
    ap.add_argument("--only", help="models whose name contains this")
    a = ap.parse_args()
    out = []
    for name, src, pdb, t, remat, pub in ROWS:
        if a.only and a.only not in name:
            continue
        base = None
        for K, pub_tf in zip(SLICES, pub):
            m = MX.row_model(name, N * K)
            assert m["batch_tokens"] == pdb * N * K * m["seq"], name
            with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as fh:
                json.dump(m, fh)
            cmd = [a.tpusim, "plan", fh.name, "--chips", "v5e", "--slice", str(N), "--slices", str(K), "--data", "1",
                   "--fsdp", str(N // t), "--tensor", str(t), "--micro", "1", "--remat", remat, "--ignore-hbm", "--json"]
            t0 = time.perf_counter()
            r = subprocess.run(cmd, capture_output=True, text=True)
            host = time.perf_counter() - t0
            os.unlink(fh.name)
            if r.returncode not in (0, 1):
                print(f"{name} x{K}: tpusim plan failed: {r.stderr.strip()}", file=sys.stderr)
                break
            j = json.loads(r.stdout)
            rows = [x for x in j["candidates"] + j["not_fit"] if x.get("step_s")]
            if not rows:
                print(f"{name} x{K}: no timing: {j['not_fit']}", file=sys.stderr)
                break
            x = rows[0]
            tf = MX.row_flops_per_token(name, m) * m["batch_tokens"] / (x["step_s"] * N * K) / 1e12
            if K == 1:
                base = (tf, pub_tf)
                continue
            row = f"{name} x{K}"
            out.append({"name": row, "split": split(row), "K": K, "step": x["step_s"], "tf": tf, "pub_tf": pub_tf,
                        "err": tf / pub_tf - 1, "scale": tf / base[0], "pub_scale": pub_tf / base[1],
                        "dcn": x.get("dcn_s", 0.0), "host": host})
            out[-1]["serr"] = out[-1]["scale"] - out[-1]["pub_scale"]
    for part in ("test", "tune"):
        rs = [r for r in out if r["split"] == part]
        if not rs:
            continue
        se = [abs(r["serr"]) for r in rs]
        ae = [abs(r["err"]) for r in rs]
        print(f"{part} split: {len(rs)} rows; scaling against one slice: |error| median {100 * statistics.median(se):.1f} "
              f"points, worst {100 * max(se):.1f}; absolute TFLOP/s |error| median {100 * statistics.median(ae):.1f} %")
        if a.markdown:
            print("\n| row | step | DCN per step | TFLOP/s/chip | published | error | scaling vs 1 slice | published "
                  "| host |\n|---|---|---|---|---|---|---|---|---|")
        for r in rs:
            cells = [r["name"], f"{r['step']:.2f} s", f"{1e3 * r['dcn']:.1f} ms", f"{r['tf']:.1f}", str(r["pub_tf"]),
                     f"{100 * r['err']:+.1f} %", f"{100 * r['scale']:.1f} %", f"{100 * r['pub_scale']:.1f} %",
                     f"{r['host']:.1f} s"]
            print("| " + " | ".join(cells) + " |" if a.markdown else "  " + "  ".join(cells))
        print()


if __name__ == "__main__":
    main()
