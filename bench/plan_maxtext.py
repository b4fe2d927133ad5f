#!/usr/bin/env python3
"""plan_maxtext.py: the MaxText rows of the validation table (../shared/reference/validation.md,
from google/maxtext configs READMEs), planned by `tpusim plan` on the published slice with the
published sharding, predicted against published TFLOP/s per chip and MFU.

Each row pins the slice, the mesh (fsdp = chips / tensor, data 1), one microbatch (MaxText's
per_device_batch_size with no gradient accumulation) and rematerialisation (remat_policy
'full' -> on; 'minimal' saves the matmul outputs -> off). The model shapes come from
MaxText's base.yml and global_parameter_scale (get_individual_scales: heads and MLP double,
then d_model, then layers), head_dim 128, SwiGLU, vocabulary 32,000, sequence 2,048. Nothing
is fitted: the chip presets and the generated program are the same as for any plan.
Candidates over HBM are timed anyway (--ignore-hbm) and marked.

    python3 bench/plan_maxtext.py --tpusim build/tpusim
"""
import argparse
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tools", "plan"))
import gen  # noqa: E402

# model file, chip, chips, tensor, remat, published TFLOP/s per chip, published MFU %, config
ROWS = [
    ("maxtext_32b", "v5p", 64, 4, "off", 328, 71.47, "v5p/32b.sh: per_device_batch 6, tensor 4, remat minimal"),
    ("maxtext_64b", "v5p", 64, 4, "off", 323, 70.31, "v5p/64b.sh: per_device_batch 3, tensor 4, remat minimal"),
    ("maxtext_128b", "v5p", 128, 8, "off", 315, 68.68, "v5p/128b.sh: per_device_batch 1, tensor 8, remat minimal"),
    ("maxtext_256b", "v5p", 512, 8, "off", 308, 67.09, "v5p/256b.sh: per_device_batch 1, tensor 8, remat minimal"),
    ("maxtext_512b", "v5p", 512, 8, "on", 294, 63.99, "v5p/512b.sh: per_device_batch 2, tensor 8, remat full"),
    ("maxtext_22b", "v4", 64, 1, "on", 156, 56.7, "v4/22b.sh: per_device_batch 13, fsdp 64, remat full"),
    ("maxtext_52b", "v4", 192, 1, "on", 154, 56.0, "v4/52b.sh: per_device_batch 7, fsdp 192, remat full"),
]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tpusim", default=os.path.join(ROOT, "build", "tpusim"))
    a = ap.parse_args()
    print(f"{'model':<13} {'slice':<9} {'mesh dxfxt':<10} {'remat':<5} {'params':>7} {'step s':>7} {'HBM/chip':>9} "
          f"{'TFLOP/s':>7} {'publ.':>5} {'err':>6} {'MFU%':>5} {'publ.':>6} {'ICI%':>5} {'host s':>6}")
    for name, chip, n, t, remat, pub_tf, pub_mfu, cfg in ROWS:
        path = os.path.join(HERE, "plan_models", name + ".json")
        m = json.load(open(path))
        f = n // t
        cmd = [a.tpusim, "plan", path, "--chips", chip, "--slice", str(n), "--tensor", str(t), "--fsdp", str(f),
               "--data", "1", "--micro", "1", "--remat", remat, "--ignore-hbm", "--json"]
        t0 = time.perf_counter()
        r = subprocess.run(cmd, capture_output=True, text=True)
        host = time.perf_counter() - t0
        if r.returncode not in (0, 1):
            print(f"{name}: tpusim plan failed: {r.stderr.strip()}")
            continue
        j = json.loads(r.stdout)
        rows = [x for x in j["candidates"] + j["not_fit"] if x.get("step_s")]
        if not rows:
            print(f"{name}: no timing: {j['not_fit']}")
            continue
        x = rows[0]
        peak = json.load(open(os.path.join(ROOT, "chips", chip + ".json")))["peak_bf16_flops"]["value"]
        cores = json.load(open(os.path.join(ROOT, "chips", chip + ".json")))["tensorcores"]["value"]
        hbm = json.load(open(os.path.join(ROOT, "chips", chip + ".json")))["hbm_bytes"]["value"]
        tf = gen.model_flops_per_token(m) * m["batch_tokens"] / (x["step_s"] * n) / 1e12
        fit = "" if x["hbm_peak"] <= hbm else " (over)"
        print(f"{m['name']:<13} {chip}-{n * cores:<5} {f'1x{f}x{t}':<10} {remat:<5} {gen.param_count(m) / 1e9:>6.1f}B "
              f"{x['step_s']:>7.3f} {x['hbm_peak'] / 1e9:>6.1f} GB{fit} {tf:>7.1f} {pub_tf:>5} {100 * (tf / pub_tf - 1):>+5.1f}% "
              f"{100 * tf * 1e12 / peak:>5.1f} {pub_mfu:>6.2f} {100 * x['ici_wait']:>5.1f} {host:>6.1f}")


if __name__ == "__main__":
    main()
