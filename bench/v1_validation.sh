#!/bin/sh
# TPU v1 against Jouppi et al., ISCA 2017, Table 3: the six applications as int8 models
# (scripts/gen_sanity_hlo.py v1 APP), timed with `tpusim run --chip v1 --mode timing`.
# Prints predicted against published TOPS and array-active %, and, separately labelled, a
# closed-form estimate from the same run with activations kept on chip (see
# docs/validation.md).
#
#   bench/v1_validation.sh [TPUSIM] [OUTDIR]     (defaults: build/tpusim, out/v1_validation)
set -eu
BIN=${1:-build/tpusim}
OUT=${2:-out/v1_validation}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$OUT"
python3 "$ROOT/scripts/gen_sanity_hlo.py" v1-stats > "$OUT/stats.json"
for app in MLP0 MLP1 LSTM0 LSTM1 CNN0 CNN1; do
  python3 "$ROOT/scripts/gen_sanity_hlo.py" v1 "$app" -o "$OUT/$app.hlo"
  "$BIN" run "$OUT/$app.hlo" --mode timing --chip v1 --report "$OUT/$app.json" > /dev/null
done
python3 - "$OUT" <<'PY' | tee "$OUT/v1_validation.md"
import json, os, sys
out = sys.argv[1]
# ISCA17 Table 3 (array active %, weight stall %, TOPS), peak 92 TOPS.
PUB = {"MLP0": (12.7, 53.9, 12.3), "MLP1": (10.6, 44.2, 9.7), "LSTM0": (8.2, 58.1, 3.7),
       "LSTM1": (10.5, 62.1, 2.8), "CNN0": (78.2, 0.0, 86.0), "CNN1": (46.2, 28.1, 14.1)}
stats = {s["app"]: s for s in json.load(open(os.path.join(out, "stats.json")))}
print("| app | weights | MAC/weight B | step | HBM (DDR3) bytes | bound | TOPS | published TOPS | error | "
      "MXU busy | published array active | HBM wait | published weight stall |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
est = []
for app, (act, stall, tops) in PUB.items():
    r = json.load(open(os.path.join(out, f"{app}.json")))
    s = stats[app]
    sec = r["step"]["seconds"]
    ops = s["ops"]
    pred = ops / sec / 1e12
    u = {x["name"]: x for x in r["units"]}
    mxu = u["mxu"]["utilization"]
    wait = r["breakdown"]["hbm_wait"]["fraction"]
    print(f"| {app} | {s['weights']/1e6:.1f}M | {s['macs_per_weight_byte']:.0f} | {sec*1e3:.3f} ms | "
          f"{r['hbm']['bytes']/1e6:.1f} MB | {r['roofline']['bound']} | {pred:.2f} | {tops} | "
          f"{100*(pred-tops)/tops:+.0f} % | {100*mxu:.1f} % | {act} % | {100*wait:.1f} % | {stall} % |")
    # Closed-form estimate: the run's own MXU busy time, overlapped perfectly with
    # streaming only the weights from DDR3 (activations resident on chip, as in v1's
    # Unified Buffer). Not a simulator output.
    mxu_s = u["mxu"]["busy_cycles"] / r["step"]["clock_hz"]
    w_s = s["weights"] / r["chip"]["hbm_bw"]
    t = max(mxu_s, w_s)
    est.append((app, mxu_s, w_s, t, ops / t / 1e12, tops))
print()
print("Estimate with activations on chip (max(MXU busy, weight bytes / DDR3 bandwidth)):")
print()
print("| app | MXU busy | weights from DDR3 | estimate | TOPS | published TOPS | error |")
print("|---|---|---|---|---|---|---|")
for app, m, w, t, p, tops in est:
    print(f"| {app} | {m*1e6:.0f} us | {w*1e6:.0f} us | {t*1e6:.0f} us | {p:.2f} | {tops} | {100*(p-tops)/tops:+.0f} % |")
PY
