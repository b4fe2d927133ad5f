#!/bin/sh
# tpusim run on the tpu backend: summary, per-op profile, --report and --trace files,
# --mode timing with the same cycles as a full run, values bit-identical to the reference
# backend on a program without dots, and one-line errors with no partial files.
. tests/cli/lib/preamble.sh
MLP_IN="-i examples/mlp.in0.npy -i examples/mlp.in1.npy -i examples/mlp.in2.npy -i examples/mlp.in3.npy -i examples/mlp.in4.npy"

# A full run (the default backend) prints values and timing and writes both files.
# shellcheck disable=SC2086
"$BIN" run examples/mlp.hlo $MLP_IN -o "$T/out" --report "$T/r.json" --trace "$T/t.json" > "$T/full" 2> "$T/err" ||
  fail "mlp full run exited $?: $(cat "$T/err")"
[ -s "$T/err" ] && fail "unexpected stderr: $(cat "$T/err")"
for pat in "^backend tpu: chip v5e" "^step time: .* cycles at " "MFU: [0-9.]+% of .* bf16 peak" "^HBM: " \
  "^roofline: intensity .* FLOP/B, ridge .* FLOP/B: (memory|compute)-bound" \
  "^breakdown: MXU busy [0-9.]+%  vector busy [0-9.]+%  waiting on HBM [0-9.]+%  idle [0-9.]+%" \
  "^top ops by time:" "^result 0: f32\[8,10\]"; do
  grep -Eq "$pat" "$T/full" || fail "full run output lacks /$pat/"
done
[ -s "$T/out/0.npy" ] || fail "no result file"
grep -q '"mfu"' "$T/r.json" || fail "report lacks mfu"
grep -q '"breakdown"' "$T/r.json" || fail "report lacks the breakdown"
grep -q '"ops"' "$T/r.json" || fail "report lacks the op profile"
head -c 40 "$T/t.json" | grep -q '^{"displayTimeUnit":"ns","traceEvents":\[' || fail "trace does not start as a trace object"
grep -q '"ph":"X"' "$T/t.json" || fail "trace has no complete events"
grep -q '"name":"thread_name"' "$T/t.json" || fail "trace has no track names"
ls "$T" | grep -q 'tmp' && fail "temporary files left behind"

# --mode timing: no values, same cycles as the full run, same report cycles.
"$BIN" run examples/mlp.hlo --mode timing --report "$T/rt.json" > "$T/timing" 2> "$T/err" || fail "timing run exited $?"
grep -q "^result" "$T/timing" && fail "timing mode printed results"
a=$(grep "^step time:" "$T/full")
b=$(grep "^step time:" "$T/timing")
[ -n "$a" ] && [ "$a" = "$b" ] || fail "timing mode cycles '$b' differ from full mode '$a'"
ca=$(grep -A1 '"step"' "$T/r.json" | grep cycles)
cb=$(grep -A1 '"step"' "$T/rt.json" | grep cycles)
[ -n "$ca" ] && [ "$ca" = "$cb" ] || fail "report cycles differ between modes: '$ca' vs '$cb'"
grep -q '"mode": "timing"' "$T/rt.json" || fail "report does not say timing mode"

# Precision changes f32 values, not the program's figures' format; highest stays close.
# shellcheck disable=SC2086
"$BIN" run examples/mlp.hlo $MLP_IN --precision highest -o "$T/hi" > /dev/null || fail "highest run"
# shellcheck disable=SC2086
"$BIN" run examples/mlp.hlo $MLP_IN --backend ref -o "$T/ref" > "$T/refout" || fail "ref run"
grep -q "^step time" "$T/refout" && fail "ref backend printed timing"
cmp -s "$T/out/0.npy" "$T/ref/0.npy" && fail "default precision gave the reference's f32 values exactly"

# Another chip preset runs and is named.
"$BIN" run examples/mlp.hlo --mode timing --chip v4 > "$T/v4" || fail "v4 run"
grep -q "^backend tpu: chip v4" "$T/v4" || fail "v4 not named"

# A program without dot/convolution or an f32 sum over a minor dimension (the TPU back end
# sums those in the vector unit's order): bit-identical values on both backends.
printf 'HloModule m\nENTRY e {\n  x = f32[3,4,8]{2,1,0} parameter(0)\n  y = f32[3,4,8]{2,1,0} exponential(x)\n  c = f32[] constant(0)\n  s = f32[4,8]{1,0} reduce(y, c), dimensions={0}, to_apply=add\n  ROOT r = f32[4,8]{1,0} sqrt(s)\n}\nadd {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n  ROOT t = f32[] add(a, b)\n}\n' > "$T/ew.hlo"
"$BIN" run "$T/ew.hlo" --seed 3 -o "$T/ew_tpu" > /dev/null 2> "$T/err" || fail "elementwise tpu run: $(cat "$T/err")"
"$BIN" run "$T/ew.hlo" --seed 3 --backend ref -o "$T/ew_ref" > /dev/null || fail "elementwise ref run"
cmp -s "$T/ew_tpu/0.npy" "$T/ew_ref/0.npy" || fail "elementwise program differs between backends"

# Every conformance program runs on the tpu backend with its inputs, and --mode timing gives
# the same step time; a while loop whose trip count only the values know is timed in full
# mode (trips from the values) and refused, with the reason, in timing mode.
ncases=0
for dir in tests/conformance/cases/*/; do
  c=$(basename "$dir")
  set --
  i=0
  while [ -e "$dir/in$i.npy" ]; do set -- "$@" -i "$dir/in$i.npy"; i=$((i + 1)); done
  ncases=$((ncases + 1))
  if ! "$BIN" run "$dir/prog.hlo" "$@" > "$T/cf" 2> "$T/ce"; then fail "$c: full run: $(cat "$T/ce")"; continue; fi
  if "$BIN" run "$dir/prog.hlo" --mode timing > "$T/ct" 2> "$T/ce"; then
    [ "$(grep '^step time' "$T/cf")" = "$(grep '^step time' "$T/ct")" ] || fail "$c: timing mode cycles differ from full mode"
  else
    grep -q "trip count unknown" "$T/ce" || fail "$c: timing run: $(cat "$T/ce")"
    grep -q "taken from the values" "$T/cf" || fail "$c: full run did not take loop trips from the values"
  fi
done
[ "$ncases" -ge 62 ] || fail "only $ncases conformance cases found"

# A data-dependent while loop in two computations (from 0 to 5 and from 1 to 6: different
# loops, which common-subexpression elimination keeps apart):
# full mode takes both inlined copies' trips from the values; timing mode refuses it at the
# user's own instruction (file:line:col, the name in the file), and takes XLA's
# known_trip_count from backend_config when the module carries it.
cat > "$T/wl.hlo" <<'EOF'
HloModule loops
cond {
  s = (s32[], s32[]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  n = s32[] get-tuple-element(s), index=1
  ROOT lt = pred[] compare(i, n), direction=LT
}
body {
  s = (s32[], s32[]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  n = s32[] get-tuple-element(s), index=1
  one = s32[] constant(1)
  j = s32[] add(i, one)
  ROOT t = (s32[], s32[]) tuple(j, n)
}
f {
  n = s32[] parameter(0)
  z = s32[] constant(0)
  t = (s32[], s32[]) tuple(z, n)
  ROOT w = (s32[], s32[]) while(t), condition=cond, body=body
}
f1 {
  n = s32[] parameter(0)
  z = s32[] constant(1)
  t = (s32[], s32[]) tuple(z, n)
  ROOT w = (s32[], s32[]) while(t), condition=cond, body=body
}
ENTRY e {
  n = s32[] constant(5)
  n6 = s32[] constant(6)
  c1 = (s32[], s32[]) call(n), to_apply=f
  c2 = (s32[], s32[]) call(n6), to_apply=f1
  a = s32[] get-tuple-element(c1), index=0
  b = s32[] get-tuple-element(c2), index=0
  ROOT r = s32[] add(a, b)
}
EOF
"$BIN" run "$T/wl.hlo" > "$T/wf" 2> "$T/err" || fail "loop in call: full run: $(cat "$T/err")"
grep -q "trip counts of 2 loop(s) taken from the values" "$T/wf" || fail "loop in call: trips not taken: $(cat "$T/wf")"
grep -q "^result 0: s32\[\]  min 11  max 11" "$T/wf" || fail "loop in call: wrong value: $(grep result "$T/wf")"
"$BIN" run "$T/wl.hlo" --mode timing > /dev/null 2> "$T/err" && fail "loop in call: timing mode accepted an unknown trip count"
grep -q "wl.hlo:20:27: error: while loop 'w': trip count unknown" "$T/err" || fail "loop in call: timing error '$(cat "$T/err")'"
sed 's/body=body$/body=body, backend_config={"known_trip_count":{"n":"5"}}/' "$T/wl.hlo" > "$T/wk.hlo"
"$BIN" run "$T/wk.hlo" --mode timing > "$T/wt" 2> "$T/err" || fail "known_trip_count: $(cat "$T/err")"
[ "$(grep '^step time' "$T/wt")" = "$(grep '^step time' "$T/wf")" ] || fail "known_trip_count: cycles differ from the full run"

# expect_error NAME PATTERN CMD...: exit status 2, one stderr line matching PATTERN, no files.
expect_error() {
  name="$1"; pat="$2"; shift 2
  rm -rf "$T/err_dir" "$T/e.json"
  "$@" > "$T/so" 2> "$T/se"
  rc=$?
  [ "$rc" = 2 ] || fail "$name: exit status $rc, want 2"
  [ "$(wc -l < "$T/se")" = 1 ] || fail "$name: stderr has $(wc -l < "$T/se") lines: $(cat "$T/se")"
  grep -Eq -e "$pat" "$T/se" || fail "$name: stderr '$(cat "$T/se")' does not match '$pat'"
  [ -e "$T/err_dir" ] && fail "$name: output directory written"
  [ -e "$T/e.json" ] && fail "$name: report written"
}
expect_error timing_o "takes no -i inputs and writes no -o" "$BIN" run examples/mlp.hlo --mode timing -o "$T/err_dir"
expect_error timing_i "takes no -i inputs" "$BIN" run examples/mlp.hlo --mode timing -i examples/mlp.in0.npy
expect_error ref_report "need --backend tpu" "$BIN" run examples/mlp.hlo --backend ref --report "$T/e.json"
expect_error bad_precision "unknown precision 'low'" "$BIN" run examples/mlp.hlo --precision low
expect_error bad_mode "unknown mode 'fast'" "$BIN" run examples/mlp.hlo --mode fast
expect_error bad_chip "unknown chip 'v99'" "$BIN" run examples/mlp.hlo --chip v99 --report "$T/e.json"
expect_error bad_top "^<command line>:4:1: error: --top takes a whole number from 0 to 1000000" "$BIN" run examples/mlp.hlo --top x
expect_error ref_first_step "need --backend tpu" "$BIN" run examples/mlp.hlo --backend ref --first-step

# Cross-program prefetch: a step of a loop reads its largest matmul parameter (w1.1; w2.1,
# f32[128,10], is laid out {0,1}, 16 x 128 elements) from VMEM, loaded by the step before,
# and says so; --first-step times a first step, which loads it: exactly its bytes more over
# HBM, no fewer cycles.
"$BIN" run examples/mlp.hlo --mode timing --report "$T/loop.json" > "$T/loop" 2> "$T/se" || fail "loop step: $(cat "$T/se")"
"$BIN" run examples/mlp.hlo --mode timing --first-step --report "$T/first.json" > "$T/first" 2> "$T/se" ||
  fail "first step: $(cat "$T/se")"
grep -q "^cross-program prefetch: w1.1 (32.77 kB) read from VMEM" "$T/loop" || fail "no prefetch line: $(cat "$T/loop")"
grep -q "cross-program prefetch" "$T/first" && fail "--first-step still prefetches"
python3 - "$T/loop.json" "$T/first.json" <<'PY' || fail "first step does not load the prefetched bytes"
import json, sys
a, b = (json.load(open(f)) for f in sys.argv[1:3])
x = a["hbm"]["cross_program_prefetch"]
assert x["buffer"] == "w1.1" and x["memory"] == "VMEM", x
assert "cross_program_prefetch" not in b["hbm"]
assert b["step"]["cycles"] >= a["step"]["cycles"]
assert b["hbm"]["bytes"] == a["hbm"]["bytes"] + x["bytes"], (a["hbm"]["bytes"], b["hbm"]["bytes"], x)
PY

# In-step prefetch: w2, read by the second dot, is copied into VMEM while the first runs;
# the summary names it and the report lists it under hbm.in_step_prefetch.
cat > "$T/spf.hlo" <<'HLO'
HloModule spf
ENTRY e {
  x = bf16[2048,512] parameter(0)
  w1 = bf16[512,512] parameter(1)
  w2 = bf16[512,512] parameter(2)
  h = bf16[2048,512] dot(x, w1), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  y = bf16[2048,512] dot(h, w2), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  ROOT z = bf16[2048,512] tanh(y)
}
HLO
"$BIN" run "$T/spf.hlo" --chip v6e --mode timing --report "$T/spf.json" > "$T/spf" 2> "$T/se" || fail "in-step prefetch run: $(cat "$T/se")"
grep -q "^in-step prefetch: 1 parameter(s), 524.3 kB, copied into VMEM while other kernels run (largest: w2)" "$T/spf" ||
  fail "no in-step prefetch line: $(cat "$T/spf")"
python3 - "$T/spf.json" <<'PY' || fail "report lacks the in-step prefetch"
import json, sys
h = json.load(open(sys.argv[1]))["hbm"]
s = h["in_step_prefetch"]
assert s["buffers"] == [{"buffer": "w2", "bytes": 524288}] and s["bytes"] == 524288, s
assert s["wait_cycles"] >= 0
PY

# An unwritable report: exit 1, one line, nothing left behind.
"$BIN" run examples/mlp.hlo --mode timing --report "$T/nodir/r.json" > /dev/null 2> "$T/se"
rc=$?
[ "$rc" = 1 ] || fail "unwritable report: exit $rc, want 1"
grep -q "nodir/r.json:0:0: error: cannot create" "$T/se" || fail "unwritable report: '$(cat "$T/se")'"

# A 20,000-element cumsum (JAX's TPU lowering: a reduce-window over the whole prefix) runs in
# linear time on both backends; the tpu backend sums in the XLA TPU compiler's blocks of 128
# (compile/passes/scan_rewrite.c), within 0.005 of float64 on values up to ~10,000 (JAX on CPU:
# 0.0017; the reference's plain left-to-right window order: 0.028, allowed 0.05).
python3 -c "import numpy as np; np.save('$T/cs.npy', np.random.RandomState(0).rand(20000).astype(np.float32))" ||
  fail "numpy for the cumsum input"
"$BIN" run tests/hlo/compile/cumsum_20000.hlo -i "$T/cs.npy" -o "$T/cs_tpu" --quiet 2> "$T/se" || fail "cumsum tpu: $(cat "$T/se")"
"$BIN" run tests/hlo/compile/cumsum_20000.hlo -i "$T/cs.npy" -o "$T/cs_ref" --backend ref --quiet 2> "$T/se" ||
  fail "cumsum ref: $(cat "$T/se")"
python3 - "$T" <<'PY' || fail "cumsum values"
import sys, numpy as np
t = sys.argv[1]
x = np.load(t + "/cs.npy").astype(np.float64)
want = np.cumsum(x)
tpu, ref = np.load(t + "/cs_tpu/0.npy"), np.load(t + "/cs_ref/0.npy")
et, er = np.abs(tpu - want).max(), np.abs(ref - want).max()
print("cumsum of 20,000: tpu error %.2g, ref error %.2g" % (et, er))
sys.exit(0 if et < 0.005 and er < 0.05 and et < er else 1)
PY

# The reverse cumsum (jnp.cumsum(reverse=True): the window padded above) runs in the
# compiler's blocks mirrored (scan_rewrite.c, ref/window.c): within 0.005 of float64, closer
# than the reference's plain window order (quadratic there, hence 4,000); a cummin along the minor dimension of an s32[158,129,33]
# (run along the major dimension between two transposes) equals numpy's exactly.
python3 -c "import numpy as np; r = np.random.RandomState(1); np.save('$T/cr.npy', r.rand(4000).astype(np.float32)); np.save('$T/cm.npy', r.randint(-1000, 1000, (158, 129, 33)).astype(np.int32))" ||
  fail "numpy for the reverse scan inputs"
"$BIN" run tests/hlo/compile/cumsum_rev_4000.hlo -i "$T/cr.npy" -o "$T/cr_tpu" --quiet 2> "$T/se" || fail "reverse cumsum tpu: $(cat "$T/se")"
"$BIN" run tests/hlo/compile/cumsum_rev_4000.hlo -i "$T/cr.npy" -o "$T/cr_ref" --backend ref --quiet 2> "$T/se" ||
  fail "reverse cumsum ref: $(cat "$T/se")"
"$BIN" run tests/hlo/compile/cummin_158x129x33.hlo -i "$T/cm.npy" -o "$T/cm_tpu" --quiet 2> "$T/se" || fail "cummin tpu: $(cat "$T/se")"
python3 - "$T" <<'PY' || fail "reverse cumsum / cummin values"
import sys, numpy as np
t = sys.argv[1]
x = np.load(t + "/cr.npy").astype(np.float64)
want = np.cumsum(x[::-1])[::-1]
tpu, ref = np.load(t + "/cr_tpu/0.npy"), np.load(t + "/cr_ref/0.npy")
et, er = np.abs(tpu - want).max(), np.abs(ref - want).max()
m = np.load(t + "/cm.npy")
same = np.array_equal(np.load(t + "/cm_tpu/0.npy"), np.minimum.accumulate(m, axis=2))
print("reverse cumsum of 4,000: tpu error %.2g, ref error %.2g; cummin s32[158,129,33] exact: %s" % (et, er, same))
sys.exit(0 if et < 0.005 and er < 0.05 and et < er and same else 1)
PY

[ "$fails" = 0 ] || { echo "$fails failure(s)"; exit 1; }
echo "all cli run_tpu checks passed"
