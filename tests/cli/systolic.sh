#!/bin/sh
# tpusim systolic against SCALE-Sim's own reports (tests/scalesim/, from
# scripts/gen_scalesim_fixtures.py): Total Cycles exact, utilisations to 0.01; --pe-level
# gives the same cycles; the TPU-mode "cycles saved" column; bad inputs exit 2 with
# file:line:col.
BIN="$1"
[ -x "$BIN" ] || { echo "usage: systolic.sh PATH/TO/tpusim" >&2; exit 2; }
FIX=tests/scalesim
TMP=$(mktemp -d "${TMPDIR:-/tmp}/tpusim_systolic.XXXXXX") || exit 1
trap 'rm -rf "$TMP"' EXIT INT TERM
fail=0
err() { echo "FAIL: $*" >&2; fail=1; }

# compare EXPECTED OURS LABEL: matches columns by header name (SCALE-Sim v3 has an extra
# "Total Cycles (incl. prefetch)" column that v2 and tpusim do not write).
compare() {
  awk -F',' -v label="$3" '
    function trim(s) { gsub(/^[ \t\r]+|[ \t\r]+$/, "", s); return s }
    FNR == 1 { for (i = 1; i <= NF; i++) col[FILENAME, trim($i)] = i; next }
    NR == FNR { nexp++; for (i = 1; i <= NF; i++) e[FNR, i] = trim($i); next }
    {
      nours++
      f0 = FILENAME
      r = FNR
      ef = ARGV[1]
      tc = e[r, col[ef, "Total Cycles"]]; oc = trim($(col[f0, "Total Cycles"]))
      if (tc != oc) { printf "%s layer %d: Total Cycles %s, SCALE-Sim %s\n", label, r - 2, oc, tc; bad = 1 }
      split("Overall Util %|Mapping Efficiency %|Compute Util %", names, "|")
      for (k = 1; k <= 3; k++) {
        ev = e[r, col[ef, names[k]]] + 0; ov = trim($(col[f0, names[k]])) + 0
        d = ev - ov; if (d < 0) d = -d
        if (d > 0.01) { printf "%s layer %d: %s %s, SCALE-Sim %s\n", label, r - 2, names[k], ov, ev; bad = 1 }
      }
    }
    END {
      if (nexp != nours || nexp == 0) { printf "%s: %d rows, SCALE-Sim %d\n", label, nours, nexp; bad = 1 }
      exit bad
    }' "$1" "$2"
}

# column FILE NAME: prints that column (by header name) of every data row.
column() {
  awk -F',' -v name="$2" '
    function trim(s) { gsub(/^[ \t\r]+|[ \t\r]+$/, "", s); return s }
    FNR == 1 { for (i = 1; i <= NF; i++) if (trim($i) == name) c = i; if (!c) exit 1; next }
    { print trim($c) }' "$1"
}

V2_HEADER='LayerID, Total Cycles, Stall Cycles, Overall Util %, Mapping Efficiency %, Compute Util %,'
runs=0
pe_runs=0
while read -r rid cfg topo kind; do
  case "$rid" in ''|'#'*) continue ;; esac
  runs=$((runs + 1))
  out="$TMP/$rid"
  if ! "$BIN" systolic -q -c "$FIX/$cfg" -t "$FIX/$topo" -i "$kind" -p "$out" --scalesim-compat; then
    err "$rid: tpusim systolic failed"; continue
  fi
  rep=$(ls "$out"/*/COMPUTE_REPORT.csv 2>/dev/null | head -n 1)
  [ -n "$rep" ] || { err "$rid: no COMPUTE_REPORT.csv"; continue; }
  [ "$(head -n 1 "$rep")" = "$V2_HEADER" ] || err "$rid: header is '$(head -n 1 "$rep")'"
  compare "$FIX/expected/$rid.csv" "$rep" "$rid" || err "$rid differs from SCALE-Sim"
  # Stall Cycles: SCALE-Sim reports 0 on every fixture, and so do we.
  [ -z "$(column "$rep" 'Stall Cycles' | grep -v '^0$')" ] || err "$rid: non-zero stall cycles"

  # TPU mode: the saved column is SCALE-Sim's total minus ours, never negative.
  tpu="$TMP/$rid.tpu"
  if "$BIN" systolic -q -c "$FIX/$cfg" -t "$FIX/$topo" -i "$kind" -p "$tpu"; then
    trep=$(ls "$tpu"/*/COMPUTE_REPORT.csv | head -n 1)
    column "$rep" 'Total Cycles' > "$TMP/serial.txt"
    column "$trep" 'Total Cycles' > "$TMP/dbl.txt"
    column "$trep" 'Cycles Saved' > "$TMP/saved.txt" || err "$rid: no saved column"
    paste -d' ' "$TMP/serial.txt" "$TMP/dbl.txt" "$TMP/saved.txt" |
      awk -v label="$rid" '{ if ($3 != $1 - $2 || $3 < 0 || NF != 3) { print label ": serial " $1 " double " $2 " saved " $3; bad = 1 } } END { exit bad }' ||
      err "$rid: cycles-saved column"
  else
    err "$rid: TPU-mode run failed"
  fi

  # PE level on the small runs: the same cycles as the closed form, in both modes.
  case "$rid" in alexnet*) continue ;; esac
  pe_runs=$((pe_runs + 1))
  if "$BIN" systolic -q -c "$FIX/$cfg" -t "$FIX/$topo" -i "$kind" -p "$TMP/pe_$rid" --scalesim-compat --pe-level; then
    prep=$(ls "$TMP/pe_$rid"/*/COMPUTE_REPORT.csv | head -n 1)
    [ "$(column "$prep" 'Total Cycles')" = "$(column "$rep" 'Total Cycles')" ] || err "$rid: --pe-level cycles differ"
    compare "$FIX/expected/$rid.csv" "$prep" "$rid --pe-level" || err "$rid --pe-level differs from SCALE-Sim"
  else
    err "$rid: --pe-level failed"
  fi
  if "$BIN" systolic -q -c "$FIX/$cfg" -t "$FIX/$topo" -i "$kind" -p "$TMP/pet_$rid" --pe-level; then
    prep=$(ls "$TMP/pet_$rid"/*/COMPUTE_REPORT.csv | head -n 1)
    for c in 'Total Cycles' 'Cycles Saved'; do
      [ "$(column "$prep" "$c")" = "$(column "$trep" "$c")" ] || err "$rid: --pe-level TPU mode '$c' differs"
    done
  else
    err "$rid: --pe-level TPU mode failed"
  fi
done < "$FIX/runs.txt"
[ "$runs" -ge 10 ] || err "only $runs fixture runs found"
[ "$pe_runs" -ge 5 ] || err "only $pe_runs PE-level runs"

# Bound on the saving, whatever the double-buffering details: every fold must feed its T
# activation rows into the array one per cycle, so any schedule clocks at least F*T cycles
# (Total Cycles >= F*T - 1), and SCALE-Sim's serial total is F*(2R + C + T - 2) - 1.
# alexnet_part on 32x32: F = 36, T = 3025, so 0 < saved <= 36*(64 + 32 - 2) = 3384.
saved=$(column "$(ls "$TMP"/alexnet_part_32x32.tpu/*/COMPUTE_REPORT.csv)" 'Cycles Saved')
[ "${saved:-0}" -gt 0 ] && [ "$saved" -le 3384 ] || err "alexnet_part_32x32: $saved cycles saved"

# A SCALE-Sim v2 config (no v3 sections) naming its topology in [network_presets].
cat > "$TMP/v2.cfg" <<EOF
[general]
run_name = v2_run

[architecture_presets]
ArrayHeight:    32
ArrayWidth:     32
IfmapSramSzkB:    64
FilterSramSzkB:   64
OfmapSramSzkB:    64
IfmapOffset:    0
FilterOffset:   10000000
OfmapOffset:    20000000
Bandwidth : 10
Dataflow : ws
MemoryBanks:   1

[network_presets]
TopologyCsvLoc: "$FIX/topologies/alexnet_part.csv"

[run_presets]
InterfaceBandwidth: CALC
EOF
if "$BIN" systolic -q -c "$TMP/v2.cfg" -p "$TMP/v2out" --scalesim-compat; then
  compare "$FIX/expected/alexnet_part_32x32.csv" "$TMP/v2out/v2_run/COMPUTE_REPORT.csv" v2cfg ||
    err "v2 config: report differs"
else
  err "v2 config run failed"
fi

# expect_bad NAME EXIT PATTERN ARGS...: exits EXIT, stderr matches PATTERN, no output dir.
expect_bad() {
  name="$1"; want="$2"; pat="$3"; shift 3
  rm -rf "$TMP/bad"
  "$BIN" systolic "$@" -p "$TMP/bad" 2> "$TMP/stderr" > /dev/null
  got=$?
  [ "$got" -eq "$want" ] || err "$name: exit $got, expected $want"
  grep -Eq -e "$pat" "$TMP/stderr" || err "$name: stderr '$(cat "$TMP/stderr")' does not match '$pat'"
  [ ! -e "$TMP/bad" ] || err "$name: left output behind"
}
printf 'Layer Name, M, N, K,\nok, 4, 4, 4,\nl, 64, 64, 64\n' > "$TMP/nocomma.csv"
printf 'Layer Name, M, N, K,\nl, 64, x, 64,\n' > "$TMP/notint.csv"
printf 'h\nc, 4, 4, 5, 1, 1, 1, 1,\n' > "$TMP/bigfilter.csv"
sed 's/Dataflow : ws/Dataflow : os/' "$FIX/configs/ws_8x8.cfg" > "$TMP/os.cfg"
sed 's/ArrayHeight: *8/ArrayHeight: -8/' "$FIX/configs/ws_8x8.cfg" > "$TMP/neg.cfg"
C8="$FIX/configs/ws_8x8.cfg"
expect_bad nocomma 2 "^$TMP/nocomma.csv:3:[0-9]+: error: .*comma" -c "$C8" -t "$TMP/nocomma.csv" -i gemm
expect_bad notint 2 "^$TMP/notint.csv:2:8: error: N must be an integer" -c "$C8" -t "$TMP/notint.csv" -i gemm
expect_bad bigfilter 2 "^$TMP/bigfilter.csv:2:10: error: Filter height" -c "$C8" -t "$TMP/bigfilter.csv"
expect_bad os 2 "^$TMP/os.cfg:[0-9]+:[0-9]+: error: .*only ws" -c "$TMP/os.cfg" -t "$TMP/notint.csv" -i gemm
expect_bad negative 2 "^$TMP/neg.cfg:5:[0-9]+: error: ArrayHeight" -c "$TMP/neg.cfg" -t "$TMP/notint.csv"
expect_bad nofile 2 "no_such.csv:0:0: error: cannot open" -c "$C8" -t "$TMP/no_such.csv"
expect_bad kind 2 "conv or gemm" -c "$C8" -t "$TMP/notint.csv" -i matrix
expect_bad noconfig 2 "-c CONFIG.cfg is required" -t "$TMP/notint.csv"
expect_bad option 2 "unknown option" -c "$C8" --frobnicate
expect_bad notopo 2 "no topology" -c "$C8"
# A gemm file read as conv: too few fields, located at the row.
expect_bad askind 2 "^$TMP/notint.csv:2:1: error: expected 8 fields" -c "$C8" -t "$TMP/notint.csv"

# The output folder cannot be made (a file is in the way): exit 1.
: > "$TMP/afile"
"$BIN" systolic -q -c "$C8" -t "$FIX/topologies/gemm_mnk.csv" -i gemm -p "$TMP/afile" 2> "$TMP/stderr"
[ $? -eq 1 ] || err "unwritable output: expected exit 1"

"$BIN" systolic --help | grep -q -- '--scalesim-compat' || err "--help"

# --animate: every cycle as text, or an HTML page; bad sizes are usage errors.
"$BIN" systolic --animate --rows 2 --cols 3 -M 3 -K 2 -N 4 > "$TMP/anim.txt" || err "--animate failed"
[ "$(grep -c 'cycle' "$TMP/anim.txt")" -ge 5 ] || err "--animate printed no cycles"
"$BIN" systolic --animate --scalesim-compat --html "$TMP/anim.html" > /dev/null || err "--animate --html failed"
grep -qi '<html' "$TMP/anim.html" || err "--animate --html wrote no page"
"$BIN" systolic --animate --rows 0 2> /dev/null
[ $? -eq 2 ] || err "--animate --rows 0: expected exit 2"

# --batch: every run of runs.txt in one process writes the same reports as one process per
# run, in both weight-loading modes; a bad list is refused at its line with nothing written.
"$BIN" systolic -q --batch "$FIX/runs.txt" -p "$TMP/batch" --scalesim-compat || err "--batch failed"
"$BIN" systolic -q --batch "$FIX/runs.txt" -p "$TMP/batch_tpu" || err "--batch (TPU mode) failed"
nb=0
while read -r rid cfg topo kind; do
  case "$rid" in ''|'#'*) continue ;; esac
  nb=$((nb + 1))
  cmp -s "$(ls "$TMP/$rid"/*/COMPUTE_REPORT.csv)" "$(ls "$TMP/batch/$rid"/*/COMPUTE_REPORT.csv)" ||
    err "--batch $rid: report differs from its own run's"
  cmp -s "$(ls "$TMP/$rid.tpu"/*/COMPUTE_REPORT.csv)" "$(ls "$TMP/batch_tpu/$rid"/*/COMPUTE_REPORT.csv)" ||
    err "--batch $rid (TPU mode): report differs from its own run's"
done < "$FIX/runs.txt"
[ "$nb" -eq "$runs" ] || err "--batch: $nb runs"
printf '# id config topology kind\n\none %s %s gemm\n' "$(pwd)/$FIX/configs/ws_32x32.cfg" "$(pwd)/$FIX/topologies/gemm_mnk.csv" > "$TMP/l_ok.txt"
cp "$TMP/l_ok.txt" "$TMP/l_few.txt"; echo 'two configs/x.cfg' >> "$TMP/l_few.txt"
cp "$TMP/l_ok.txt" "$TMP/l_kind.txt"; echo "two $(pwd)/$C8 t.csv matrix" >> "$TMP/l_kind.txt"
cp "$TMP/l_ok.txt" "$TMP/l_dup.txt"; echo "one $(pwd)/$C8 t.csv" >> "$TMP/l_dup.txt"
cp "$TMP/l_ok.txt" "$TMP/l_slash.txt"; echo "a/b $(pwd)/$C8 t.csv" >> "$TMP/l_slash.txt"
cp "$TMP/l_ok.txt" "$TMP/l_nocfg.txt"; echo "two no_such.cfg t.csv" >> "$TMP/l_nocfg.txt"
: > "$TMP/l_empty.txt"
expect_bad batch_fields 2 "^$TMP/l_few.txt:4:1: error: a run is 'RUN_ID CONFIG TOPOLOGY" --batch "$TMP/l_few.txt"
expect_bad batch_kind 2 "^$TMP/l_kind.txt:4:[0-9]+: error: the kind is conv or gemm, not 'matrix'" --batch "$TMP/l_kind.txt"
expect_bad batch_dup 2 "^$TMP/l_dup.txt:4:1: error: run id 'one' is given twice" --batch "$TMP/l_dup.txt"
expect_bad batch_slash 2 "^$TMP/l_slash.txt:4:1: error: run id 'a/b' is not a folder name" --batch "$TMP/l_slash.txt"
expect_bad batch_nocfg 2 "^$TMP/no_such.cfg:0:0: error: cannot open" --batch "$TMP/l_nocfg.txt"
expect_bad batch_empty 2 "^$TMP/l_empty.txt:0:0: error: the list names no run" --batch "$TMP/l_empty.txt"
expect_bad batch_nolist 2 "^$TMP/no_list.txt:0:0: error: cannot open" --batch "$TMP/no_list.txt"
expect_bad batch_and_c 2 "error: --batch takes each run's config" --batch "$TMP/l_ok.txt" -c "$C8"
"$BIN" systolic -q --batch "$TMP/l_ok.txt" -p "$TMP/l_out" --scalesim-compat &&
  cmp -s "$(ls "$TMP/l_out/one"/*/COMPUTE_REPORT.csv)" "$(ls "$TMP/gemm_mnk_32x32"/*/COMPUTE_REPORT.csv)" ||
  err "--batch with absolute paths"

[ "$fail" -eq 0 ] && echo "systolic: $runs runs against SCALE-Sim, $pe_runs at PE level: ok"
exit "$fail"
