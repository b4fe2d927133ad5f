#!/usr/bin/env python3
"""plan_maxtext.py: MaxText's published training throughput (the configs READMEs of
google/maxtext, now AI-Hypercomputer/maxtext: configs/tpu/v5p, v4 and v5e), planned by
`tpusim plan` on the published slice with the published sharding and remat policy, predicted
against published TFLOP/s per chip and MFU; and whether tpusim's HBM verdict lets the
published configuration run.

Each row pins the slice, the mesh (fsdp = chips / tensor, data 1), one microbatch (MaxText's
per_device_batch_size with no gradient accumulation) and MaxText's remat policy by name
(docs/plan.md, "Remat policies"). The model shapes come from MaxText's base.yml and
global_parameter_scale (get_individual_scales: heads and MLP double, then d_model, then
layers), head_dim 128, SwiGLU, vocabulary 32,000, sequence 2,048. Nothing is fitted: the
chip presets and the generated program are the same as for any plan. Rows are split
tune/test by a hash of the row's name (sha1, even first byte: tune; docs/validation.md);
nothing is calibrated on either half, and the test half is reported first. Every row is
timed (--ignore-hbm); the HBM column is tpusim's verdict on the row's own program
(`tpusim compile`: argument + output − alias + temp bytes, docs/plan.md).

    python3 bench/plan_maxtext.py --tpusim build/tpusim [--markdown]
"""
import argparse
import hashlib
import json
import os
import re
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

# model file, chip, chips, tensor, remat policy, published TFLOP/s per chip, published MFU %, source
ROWS = [
    ("maxtext_32b", "v5p", 64, 4, "minimal", 328, 71.47, "v5p/README, 32b.sh: per_device_batch 6, tensor 4"),
    ("maxtext_64b", "v5p", 64, 4, "minimal", 323, 70.31, "v5p/README, 64b.sh: per_device_batch 3, tensor 4"),
    ("maxtext_128b", "v5p", 128, 8, "minimal", 315, 68.68, "v5p/README, 128b.sh: per_device_batch 1, tensor 8"),
    ("maxtext_256b", "v5p", 512, 8, "minimal", 308, 67.09, "v5p/README, 256b.sh: per_device_batch 1, tensor 8"),
    ("maxtext_512b", "v5p", 512, 8, "full", 294, 63.99, "v5p/README, 512b.sh: per_device_batch 2, tensor 8"),
    ("maxtext_22b", "v4", 64, 1, "full", 156, 56.7, "README of 281e04bf3 (2023-04-27), 1xv4-128.sh: per_device_batch 16, fsdp 64"),
    ("maxtext_52b", "v4", 192, 1, "full", 154, 56.0, "README of c0e67ec1a (2023-03-08), 1xv4-384.sh: per_device_batch 10, fsdp 192"),
    ("maxtext_16b", "v5e", 256, 1, "full", 120, 61.10, "v5e/README (1x v5e-256), 16b.sh: per_device_batch 6, fsdp 256"),
    ("maxtext_32b_v5e", "v5e", 256, 1, "full", 132, 66.86, "v5e/README (1x v5e-256), 32b.sh: per_device_batch 4, fsdp 256"),
    ("maxtext_64b_v5e", "v5e", 256, 1, "full", 118, 59.90, "v5e/README (1x v5e-256), 64b.sh: per_device_batch 2, fsdp 256"),
    ("maxtext_128b_v5e", "v5e", 256, 16, "minimal_offloaded", 110, 56.06,
     "v5e/README (1x v5e-256), 128b.sh: per_device_batch 1, fsdp 16, tensor 16"),
]
# The v5e rows use the v5p rows' shapes at their own batch: (model file, per-device batch).
SHAPE = {"maxtext_32b_v5e": ("maxtext_32b", 4), "maxtext_64b_v5e": ("maxtext_64b", 2),
         "maxtext_128b_v5e": ("maxtext_128b", 1), "maxtext_22b": ("maxtext_22b_2023", 16),
         "maxtext_52b": ("maxtext_52b_2023", 10)}
# The v4 rows were measured in March-April 2023 (MaxText's README table, unchanged since; its
# v4 scripts' later per_device_batch 13 and 7, commit 475f408a of 2024-03, came with no new
# figures) on the model of that time's base.yml: head_dim 256, a ReLU MLP, vocabulary 32,768,
# sequence 1,024, the embedding shared with the LM head (logits_via_embedding), the attention
# scores materialised (MaxText's flash kernel came in 2023-09); and its train.py counted
# TFLOP/s as 6 x every parameter x tokens (no attention term). Those rows use that count.
TIED_6N = {"maxtext_22b", "maxtext_52b"}


def row_flops_per_token(name, m):
    """Training FLOPs per token as the row's published figure counts them."""
    if name in TIED_6N:
        return 6 * (gen.param_count(m) - m["d_model"] * m["vocab"])  # one embedding: tied
    return gen.model_flops_per_token(m)


def split(name):
    return "tune" if hashlib.sha1(name.encode()).digest()[0] % 2 == 0 else "test"


def footprint(tpusim, m, cand, chip):
    """tpusim's HBM verdict on the row's program: (bytes needed, fits)."""
    st = gen.Step(m, cand)
    with tempfile.NamedTemporaryFile("w", suffix=".hlo", delete=False) as fh:
        fh.write(st.module())
    try:
        r = subprocess.run([tpusim, "compile", fh.name, "--emit", "asm", "--chip", chip], capture_output=True, text=True)
    finally:
        os.unlink(fh.name)
    mm = re.search(r"needs (\d+) bytes of HBM", r.stderr)
    if mm:
        return int(mm.group(1)), False
    mm = re.search(r"hbm_footprint=(\d+)", r.stdout)
    return (int(mm.group(1)) if mm else 0), r.returncode == 0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tpusim", default=os.path.join(ROOT, "build", "tpusim"))
    ap.add_argument("--markdown", action="store_true")
    ap.add_argument("--only", help="rows whose name contains this")
    a = ap.parse_args()
    out = []
    for name, chip, n, t, remat, pub_tf, pub_mfu, cfg in ROWS:
        if a.only and a.only not in name:
            continue
        src, pdb = SHAPE.get(name, (name, None))
        path = os.path.join(HERE, "plan_models", src + ".json")
        m = P.load_model(path)
        if pdb:
            m["batch_tokens"] = pdb * n * m["seq"]
            m["name"] = name.replace("_", "-")
        f = n // t
        with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as fh:
            json.dump(m, fh)
        cmd = [a.tpusim, "plan", fh.name, "--chips", chip, "--slice", str(n), "--tensor", str(t), "--fsdp", str(f),
               "--data", "1", "--micro", "1", "--remat", remat, "--ignore-hbm", "--json"]
        t0 = time.perf_counter()
        r = subprocess.run(cmd, capture_output=True, text=True)
        host = time.perf_counter() - t0
        os.unlink(fh.name)
        if r.returncode not in (0, 1):
            print(f"{name}: tpusim plan failed: {r.stderr.strip()}")
            continue
        j = json.loads(r.stdout)
        rows = [x for x in j["candidates"] + j["not_fit"] if x.get("step_s")]
        if not rows:
            print(f"{name}: no timing: {j['not_fit']}")
            continue
        x = rows[0]
        spec = json.load(open(os.path.join(ROOT, "chips", chip + ".json")))
        peak, cores, hbm = (spec[k]["value"] for k in ("peak_bf16_flops", "tensorcores", "hbm_bytes"))
        tf = row_flops_per_token(name, m) * m["batch_tokens"] / (x["step_s"] * n) / 1e12
        need, fits = footprint(a.tpusim, m, {"data": 1, "fsdp": f, "tensor": t, "micro": 1, "remat": remat,
                                             "windowed": x.get("windowed", False)}, chip)
        out.append({"name": name, "split": split(name), "chip": chip, "slice": f"{chip}-{n * cores}",
                    "mesh": f"1x{f}x{t}", "remat": remat, "params": gen.param_count(m), "step": x["step_s"],
                    "need": need, "fits": fits and need <= hbm, "hbm": hbm, "tf": tf, "pub_tf": pub_tf,
                    "err": tf / pub_tf - 1, "mfu": 100 * tf * 1e12 / peak, "pub_mfu": pub_mfu,
                    "ici": x["ici_wait"], "host": host, "cfg": cfg})
    for part in ("test", "tune"):
        rs = [r for r in out if r["split"] == part]
        if not rs:
            continue
        errs = [abs(r["err"]) for r in rs]
        fit = sum(r["fits"] for r in rs)
        print(f"{part} split: {len(rs)} rows, |MFU error| median {100 * statistics.median(errs):.1f} %, worst "
              f"{100 * max(errs):.1f} %; {fit}/{len(rs)} fit HBM in tpusim's verdict")
        if a.markdown:
            print("\n| row | slice | mesh d×f×t | remat | step | HBM need (tpusim) | TFLOP/s/chip | published | error "
                  "| MFU | published | waiting on ICI |\n|---|---|---|---|---|---|---|---|---|---|---|---|")
        for r in rs:
            fit = f"{r['need'] / 1e9:.1f} GB" + ("" if r["fits"] else " (over)")
            cells = [r["name"], r["slice"], r["mesh"], r["remat"], f"{r['step']:.2f} s", fit, f"{r['tf']:.1f}",
                     str(r["pub_tf"]), f"{100 * r['err']:+.1f} %", f"{r['mfu']:.1f} %", f"{r['pub_mfu']:.2f} %",
                     f"{100 * r['ici']:.1f} %"]
            print("| " + " | ".join(cells) + " |" if a.markdown else "  " + "  ".join(cells))
        print()


if __name__ == "__main__":
    main()
