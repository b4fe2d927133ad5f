#!/usr/bin/env python3
"""check_tpusim.py [--tpusim build/tpusim] [CASE ...]: tpusim against the pod corpus, by hand
(numpy needed; the C test tests/unit/pod/test_pod_cases.c covers the global runs).

For every case in tests/pod/cases:
  per-device  `tpusim run opt.hlo -i in*.npy --backend ref --per-device`: device p's results
              (partition / replica p, on device device_assignment[p]) against dev/D/out*.npy
  xla-part    the same for xla_part.hlo (XLA's program right after its SPMD partitioner,
              bench/spmd_partdump.py), where the case has one
  gspmd       `tpusim run prog_gspmd.hlo -i in*.npy --backend ref` (tpusim partitions the
              GSPMD-form program) against out*.npy
each within the case's tolerance (0: bit-identical). Prints one line per case and a total."""
import argparse, json, os, subprocess, sys, tempfile
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))


def close(got, want, tol):
    if got.shape != want.shape:
        return False, float("inf")
    d = float(np.max(np.abs(got - want))) if want.size else 0.0
    return (np.allclose(got, want, rtol=tol, atol=tol) if tol else np.array_equal(got, want)), d


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tpusim", default=os.path.join(HERE, "..", "..", "build", "tpusim"))
    ap.add_argument("cases", nargs="*")
    a = ap.parse_args()
    root = os.path.join(HERE, "cases")
    names = a.cases or sorted(os.listdir(root))
    tmp = tempfile.mkdtemp()
    total = {"per-device": [0, 0], "xla-part": [0, 0], "gspmd": [0, 0]}
    for name in names:
        d = os.path.join(root, name)
        meta = json.load(open(os.path.join(d, "meta.json")))
        tol = meta["atol"]
        nin = len([f for f in os.listdir(d) if f.startswith("in") and f.endswith(".npy")])
        nout = len([f for f in os.listdir(d) if f.startswith("out") and f.endswith(".npy")])
        args = sum([["-i", os.path.join(d, f"in{i}.npy")] for i in range(nin)], [])
        row = {}
        for key, f in (("per-device", "opt.hlo"), ("xla-part", "xla_part.hlo")):
            if not os.path.exists(os.path.join(d, f)):
                continue
            o = os.path.join(tmp, name + "_" + key)
            r = subprocess.run([a.tpusim, "run", os.path.join(d, f), *args, "--backend", "ref", "--per-device",
                                "-o", o, "--quiet"], capture_output=True, text=True)
            ok, worst = r.returncode == 0, 0.0
            for p, dv in enumerate(meta["device_assignment"] if ok else []):
                for k in range(nout):
                    want = np.load(os.path.join(d, "dev", str(dv), f"out{k}.npy")).astype(np.float64)
                    got = np.load(os.path.join(o, f"dev{p}", f"{k}.npy")).astype(np.float64).reshape(want.shape)
                    good, diff = close(got, want, tol)
                    ok, worst = ok and good, max(worst, diff)
            row[key] = (ok, f"max diff {worst:.3g}" if r.returncode == 0 else r.stderr.strip().splitlines()[-1])
        pg = os.path.join(d, "prog_gspmd.hlo")
        if os.path.exists(pg):
            o = os.path.join(tmp, name + "_gs")
            r = subprocess.run([a.tpusim, "run", pg, *args, "--backend", "ref", "-o", o, "--quiet"],
                               capture_output=True, text=True)
            ok, worst = r.returncode == 0, 0.0
            for k in range(nout if ok else 0):
                good, diff = close(np.load(os.path.join(o, f"{k}.npy")).astype(np.float64),
                                   np.load(os.path.join(d, f"out{k}.npy")).astype(np.float64), tol)
                ok, worst = ok and good, max(worst, diff)
            row["gspmd"] = (ok, f"max diff {worst:.3g}" if r.returncode == 0 else r.stderr.strip().splitlines()[-1])
        for k, (ok, msg) in row.items():
            total[k][0] += ok
            total[k][1] += 1
        print(f"{name:20s} " + "  ".join(f"{k}: {'ok' if ok else 'FAIL'} ({msg})" for k, (ok, msg) in row.items()))
    print("  ".join(f"{k}: {p} of {n} match" for k, (p, n) in total.items()))
    return 0 if all(p == n for p, n in total.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
