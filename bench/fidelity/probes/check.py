#!/usr/bin/env python3
"""check.py [NAME_GLOB...]: tpusim against the XLA TPU compiler's figures on the committed probe
programs of bench/fidelity/probes/data (made by probe.py with libtpu; nothing else needed
here): per program and generation, the compiler's cycles, tpusim's (its step time at the
compiler's clock) and the error. '*' marks programs with an op the compiler left unestimated."""
import glob, json, os, subprocess, sys, tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
TPUSIM = os.environ.get("TPUSIM", os.path.join(HERE, "..", "..", "..", "build", "tpusim"))
CLOCK = {"v4": 1.05e9, "v5e": 1.5e9, "v5p": 1.75e9, "v6e": 1.75e9}  # as compare.py reads them
PRESET = {"v4": "v4:core"}  # a v4 compile-only device is one TensorCore

for pat in sys.argv[1:] or ["*"]:
    for js in sorted(glob.glob(os.path.join(HERE, "data", pat + ".json"))):
        name = os.path.basename(js)[:-5]
        rec = json.load(open(js))
        row = []
        for chip in ("v4", "v5e", "v5p", "v6e"):
            if chip not in rec:
                continue
            with tempfile.NamedTemporaryFile(suffix=".json") as rep:
                r = subprocess.run([TPUSIM, "run", os.path.join(HERE, "data", name + ".hlo"), "--mode", "timing",
                                    "--chip", PRESET.get(chip, chip), "--report", rep.name, "--quiet"],
                                   capture_output=True, text=True)
                if r.returncode:
                    row.append(f"{chip} refused: {r.stderr.strip()[:80]}")
                    continue
                t = json.load(open(rep.name))["step"]["seconds"] * CLOCK[chip]
            c = rec[chip]["sum"]
            row.append(f"{chip} {c:>9} {t:>9.0f} {100 * (t - c) / c:+7.1f}%" + ("*" if rec[chip].get("unest") else " "))
        print(f"{name:32s} " + " | ".join(row))
