#!/usr/bin/env python3
"""plan_maxtext.py: MaxText's published training throughput (the configs READMEs of
google/maxtext, now AI-Hypercomputer/maxtext: configs/tpu/v5p, v4 and v5e), planned by
`tpusim plan` on the published slice with the published sharding and remat policy, predicted
against published TFLOP/s per chip and MFU; and whether tpusim's HBM verdict lets the
published configuration run.

Each row pins the slice, the mesh (fsdp = chips / tensor, data 1), one microbatch (MaxText's
per_device_batch_size with no gradient accumulation) and MaxText's remat policy by name
(docs/plan.md, "Remat policies"), and runs the program the published figure was measured on:
the model of the base.yml and script of the commit that published it (RUN, model_2023 below;
docs/validation.md), its TFLOP/s counted as that commit's train.py counted. Nothing is
fitted: the chip presets and the generated program are the same as for any plan. Rows are split
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

# row, chip, chips, tensor, remat policy, published TFLOP/s per chip, published MFU %, source.
# Every figure is the README's of the commit that published it, and the row runs the program of
# that commit's script and base.yml (docs/validation.md): the v5p and v5e rows MaxText's
# configs/v5p and configs/v5e READMEs and scripts of 76bd53b0 (2023-12-15), the v4 rows its
# README of 2023-03/04 and configs/1xv4-*.sh of then.
ROWS = [
    ("maxtext_32b", "v5p", 64, 4, "minimal", 328, 71.47, "v5p/README, 32b.sh at 76bd53b0: scale 32, per_device_batch 8, tensor 4"),
    ("maxtext_64b", "v5p", 64, 4, "minimal", 323, 70.31, "v5p/README, 64b.sh at 76bd53b0: scale 64, per_device_batch 4, tensor 4"),
    ("maxtext_128b", "v5p", 128, 8, "minimal", 315, 68.68, "v5p/README, 128b.sh at 76bd53b0: scale 128, per_device_batch 2, tensor 8"),
    ("maxtext_256b", "v5p", 512, 8, "minimal", 308, 67.09, "v5p/README, 256b.sh at 76bd53b0: scale 256, per_device_batch 2, tensor 8"),
    ("maxtext_512b", "v5p", 512, 16, "full", 294, 63.99, "v5p/README, 512b.sh at 76bd53b0: scale 512, per_device_batch 2, tensor 16"),
    ("maxtext_22b", "v4", 64, 1, "full", 156, 56.7, "README of 281e04bf (2023-04-27), 1xv4-128.sh: per_device_batch 16, fsdp 64"),
    ("maxtext_52b", "v4", 192, 1, "full", 154, 56.0, "README of c0e67ec1 / e286533d (2023-03), 1xv4-384.sh: per_device_batch 10, fsdp 192"),
    ("maxtext_16b", "v5e", 256, 1, "full", 120, 61.10, "v5e/README (1x v5e-256), 16b.sh at 76bd53b0: scale 16, per_device_batch 6, fsdp 256"),
    ("maxtext_32b_v5e", "v5e", 256, 1, "full", 132, 66.86, "v5e/README, 32b.sh at 76bd53b0: scale 32, per_device_batch 4, fsdp 256"),
    ("maxtext_64b_v5e", "v5e", 256, 1, "full", 118, 59.90, "v5e/README, 64b.sh at 76bd53b0: scale 64, per_device_batch 2, fsdp 256"),
    ("maxtext_128b_v5e", "v5e", 256, 16, "full", 110, 56.06,
     "v5e/README, 128b.sh at 76bd53b0: scale 128, per_device_batch 1, fsdp 16, tensor 16"),
]
# The collectives each row's script lets the XLA TPU compiler run asynchronously (its
# LIBTPU_INIT_ARGS; plan.py MAXTEXT_ASYNC, what `tpusim plan` takes by default): the v5p and v5e
# scripts of 76bd53b0 set MaxText's async collective fusion flags (all); the v4 scripts
# (1xv4-128.sh at 281e04bf, 1xv4-384.sh at e286533d, v4/22b.sh and 52b.sh at 76bd53b0) only
# --xla_enable_async_all_gather=true (all-gather).
XLA_ASYNC = {c: P.MAXTEXT_ASYNC.get(c, "all") for c in ("v4", "v5e", "v5p")}
# The program each row's figure was measured on: (global_parameter_scale of the 2023 base.yml,
# or a model file), per-device batch, and how that commit's train.py counted TFLOP/s.
RUN = {"maxtext_32b": (32, 8, "6N+causal"), "maxtext_64b": (64, 4, "6N+causal"),
       "maxtext_128b": (128, 2, "6N+causal"), "maxtext_256b": (256, 2, "6N+causal"),
       "maxtext_512b": (512, 2, "6N+causal"), "maxtext_16b": (16, 6, "6N+causal"),
       "maxtext_32b_v5e": (32, 4, "6N+causal"), "maxtext_64b_v5e": (64, 2, "6N+causal"),
       "maxtext_128b_v5e": (128, 1, "6N+causal"),
       "maxtext_22b": ("maxtext_22b_2023", 16, "6N"), "maxtext_52b": ("maxtext_52b_2023", 10, "6N")}


def model_2023(scale):
    """MaxText's default decoder before 2024-02-14 (base.yml of af006780, 2023-09, to 3b2ac811,
    "Modify default config for good convergence"): base d_model 2,560, 8 heads x 256, a ReLU MLP
    of 8,192, 16 layers, vocabulary 32,768 (tied: logits_via_embedding), scaled as that
    pyconfig's get_individual_scales: per doubling, heads and MLP, then d_model, then layers."""
    k = scale.bit_length() - 1
    assert 1 << k == scale, scale
    b, rem = divmod(k, 3)
    hs, es = b + (rem > 0), b + (rem > 1)
    return {"name": f"maxtext-{scale}b-2023", "layers": 16 << b, "d_model": 2560 << es, "heads": 8 << hs,
            "head_dim": 256, "mlp": 8192 << hs, "mlp_kind": "relu", "vocab": 32768, "seq": 2048,
            "batch_tokens": 0, "train_tokens": 1e12, "dtype": "bf16", "optimizer": "adam", "experts": 0,
            "top_k": 2, "attention": "flash", "block": "parallel", "qk_norm": "qkv"}


def row_model(name, n):
    """The row's model, its global batch set from the per-device batch over n chips."""
    src, pdb, _ = RUN[name]
    m = model_2023(src) if isinstance(src, int) else P.load_model(os.path.join(HERE, "plan_models", src + ".json"))
    m["batch_tokens"] = pdb * n * m["seq"]
    m["name"] = name.replace("_", "-")
    return m


def row_flops_per_token(name, m):
    """Training FLOPs per token as the commit that published the row counted them: 6 x every
    parameter (the tied embedding once) and, from 2023-06, 12 x seq x heads x head_dim per
    layer of attention, halved for the causal mask from 2023-11 (64ee4e93)."""
    n = gen.param_count(m) - m["d_model"] * m["vocab"]
    attn = 6 * m["seq"] * m["heads"] * m["head_dim"] * m["layers"]
    return 6 * n + (attn if RUN[name][2] == "6N+causal" else 0)


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
        m = row_model(name, n)
        f = n // t
        with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as fh:
            json.dump(m, fh)
        cmd = [a.tpusim, "plan", fh.name, "--chips", chip, "--slice", str(n), "--tensor", str(t), "--fsdp", str(f),
               "--data", "1", "--micro", "1", "--remat", remat, "--ignore-hbm", "--json", "--xla-async", XLA_ASYNC[chip]]
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
                                             "windowed": x.get("windowed", False),
                                             **({"overlap": False} if XLA_ASYNC[chip] == "all-gather" else {})}, chip)
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
