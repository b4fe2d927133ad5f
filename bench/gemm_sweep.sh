#!/bin/sh
# bf16 GEMM sweep on the v4, v5e and v5p presets with `tpusim run --mode timing`: each
# point's step time, TFLOP/s, MFU, arithmetic intensity and bound from the --report JSON,
# set against the roofline closed form min(peak, I_min x HBM bandwidth) computed in the
# same run (I_min = 2MNK / minimum bytes: A and B in bf16 read once, C in f32 written once).
#
#   bench/gemm_sweep.sh [TPUSIM] [OUTDIR]     (defaults: build/tpusim, out/gemm_sweep)
#
# Writes OUTDIR/gemm_sweep.tsv (one row per chip and shape), OUTDIR/gemm_sweep.md (tables)
# and OUTDIR/roofline.svg; prints the tables. Needs python3 (not at test time).
set -eu
BIN=${1:-build/tpusim}
OUT=${2:-out/gemm_sweep}
CHIPS=${CHIPS:-"v4 v5e v5p"}
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
mkdir -p "$OUT/hlo" "$OUT/reports"

# Square sizes, then skinny ones: small M with N=K=8192, and small K with M=N=8192.
SHAPES=""
for s in 128 256 512 1024 2048 4096 8192 16384; do SHAPES="$SHAPES ${s}x${s}x${s}"; done
SHAPES="$SHAPES 8x8192x8192 32x8192x8192 128x8192x8192 8192x8192x128 8192x8192x512"

TSV="$OUT/gemm_sweep.tsv"
: > "$TSV.tmp"
for shape in $SHAPES; do
  m=${shape%%x*}; rest=${shape#*x}; n=${rest%%x*}; k=${rest#*x}
  hlo="$OUT/hlo/gemm_${shape}.hlo"
  python3 "$ROOT/scripts/gen_sanity_hlo.py" gemm "$m" "$n" "$k" --out-dtype f32 -o "$hlo"
  for chip in $CHIPS; do
    rep="$OUT/reports/${chip}_${shape}.json"
    "$BIN" run "$hlo" --mode timing --chip "$chip" --report "$rep" > /dev/null
    python3 - "$rep" "$chip" "$m" "$n" "$k" >> "$TSV.tmp" <<'PY'
import json, sys
rep, chip, m, n, k = sys.argv[1], sys.argv[2], *map(int, sys.argv[3:6])
r = json.load(open(rep))
peak, bw = r["flops"]["peak_per_s"], r["chip"]["hbm_bw"]
useful = r["flops"]["useful"]
imin = 2 * m * n * k / (2 * m * k + 2 * k * n + 4 * m * n)
roof = min(peak, imin * bw)
ach = r["flops"]["achieved_per_s"]
bd = r["breakdown"]
print("\t".join(str(x) for x in [
    chip, m, n, k, r["step"]["seconds"], r["step"]["cycles"], useful, ach, r["flops"]["mfu"],
    r["hbm"]["bytes"], r["roofline"]["arithmetic_intensity"], imin, r["roofline"]["ridge_point"],
    r["roofline"]["bound"], roof, ach / roof, r["flops"]["padding_waste"],
    bd["mxu_busy"]["fraction"], bd["hbm_wait"]["fraction"], peak, bw]))
PY
  done
done
{
  printf 'chip\tm\tn\tk\tseconds\tcycles\tflops\tflops_per_s\tmfu\thbm_bytes\tintensity\tintensity_min\tridge\tbound\troofline_flops_per_s\tvs_roofline\tpadding_waste\tmxu_busy\thbm_wait\tpeak\thbm_bw\n'
  cat "$TSV.tmp"
} > "$TSV"
rm -f "$TSV.tmp"

python3 - "$TSV" > "$OUT/gemm_sweep.md" <<'PY'
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1]), delimiter="\t"))
def t(s):
    s = float(s)
    return f"{s*1e6:.3g} us" if s < 1e-3 else f"{s*1e3:.4g} ms"
for chip in dict.fromkeys(r["chip"] for r in rows):
    rs = [r for r in rows if r["chip"] == chip]
    r0 = rs[0]
    print(f"### {chip}: peak {float(r0['peak'])/1e12:.0f} TFLOP/s bf16, HBM {float(r0['hbm_bw'])/1e9:.0f} GB/s, "
          f"ridge {float(r0['ridge']):.0f} FLOP/B\n")
    print("| M x N x K | time | TFLOP/s | MFU | intensity (moved) | intensity (min) | bound | roofline TFLOP/s | achieved / roofline | MXU busy | HBM wait |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rs:
        print(f"| {r['m']} x {r['n']} x {r['k']} | {t(r['seconds'])} | {float(r['flops_per_s'])/1e12:.1f} | "
              f"{100*float(r['mfu']):.1f} % | {float(r['intensity']):.0f} | {float(r['intensity_min']):.0f} | {r['bound']} | "
              f"{float(r['roofline_flops_per_s'])/1e12:.1f} | {float(r['vs_roofline']):.3f} | "
              f"{100*float(r['mxu_busy']):.1f} % | {100*float(r['hbm_wait']):.1f} % |")
    print()
PY
python3 "$HERE/roofline_svg.py" "$TSV" "$OUT/roofline.svg"
cat "$OUT/gemm_sweep.md"
echo "wrote $TSV, $OUT/gemm_sweep.md, $OUT/roofline.svg"
