#!/bin/sh
# Multi-slice programs from the XLA TPU compiler as inputs (src/pod/megascale.c): one slice's
# module whose exchanges between slices are send/recv pairs to the megascale runtime runs on
# `tpusim run --slices 2` as those exchanges over DCN, with JAX's values (XLA CPU), the DCN
# time in the summary and report, and one-line errors for a run of the wrong slice count.
. tests/cli/lib/preamble.sh
command -v python3 > /dev/null && python3 -c "import numpy" 2> /dev/null || { echo "skip: no python3 with numpy"; exit 77; }
close() { # GOT WANT TOL: within TOL of WANT's largest magnitude
  python3 - "$1" "$2" "$3" <<'PY'
import sys, numpy as np
a, b, tol = np.load(sys.argv[1]), np.load(sys.argv[2]), float(sys.argv[3])
sys.exit(0 if a.shape == b.shape and np.abs(a - b).max() <= tol * max(np.abs(b).max(), 1e-30) else 1)
PY
}
# tests/pod/megascale/prog.hlo (gen.py): psum (ALL_REDUCE), all_gather (ALL_GATHER) and
# ppermute (ONE_TO_ONE) over a "dcn" axis of 2 v5e 2x2 slices; JAX's values on 8 CPU devices.
M=tests/pod/megascale
"$BIN" run $M/prog.hlo --slices 2 --chip v5e --precision highest -i $M/x.npy --out-sharding @$M/shardings \
  -o "$T/m" --report "$T/m.json" > "$T/out" 2> "$T/err" || fail "prog.hlo --slices 2 exited $?: $(cat "$T/err")"
grep -q "^multi-slice: one slice's program (4 chips) run on 2 slices" "$T/out" || fail "no multi-slice line"
grep -q "^pod: 8 devices" "$T/out" || fail "not 8 devices: $(grep '^pod' "$T/out")"
for k in 0 1 2; do close "$T/m/$k.npy" $M/out$k.npy 1e-6 || fail "prog.hlo result $k differs from JAX's"; done
grep -Eq "^DCN: 3 collectives span slices" "$T/out" || fail "DCN line: $(grep '^DCN' "$T/out")"
python3 - "$T/m.json" <<'PY' || fail "the report's megascale collectives"
import json, sys
p = json.load(open(sys.argv[1]))["pod"]
dcn = {c["kind"]: c for c in p["collectives"] if c.get("dcn_slices") == 2}
assert sorted(dcn) == ["all-gather", "all-reduce", "collective-permute"], dcn
# the psum's buffer, f32[8,32] padded by ZeroCrop to its (8,128) tile: 4096 bytes, all of it
# over DCN for 2 slices (2(K-1)/K), in two ring steps of 10 us; the gather's and the
# permute's shard of 1024 bytes in one step each
assert dcn["all-reduce"]["dcn_bytes_per_chip"] == 4096, dcn
assert dcn["all-gather"]["dcn_bytes_per_chip"] == 1024 and dcn["collective-permute"]["dcn_bytes_per_chip"] == 1024
assert abs(dcn["all-reduce"]["dcn_seconds_each"] - 2e-5 - 4096 / 3.125e9) < 1e-12, dcn
PY
# The wrong slice count, or none, is refused at the transfer that says how many it spans.
"$BIN" run $M/prog.hlo --chip v5e --mode timing > "$T/out" 2> "$T/err"
rc=$?
[ "$rc" = 2 ] && grep -Eq "^$M/prog.hlo:[0-9]+:[0-9]+: error: '[a-z.0-9-]+' exchanges data between slices over the megascale runtime \(DCN\): run it with --slices K" "$T/err" ||
  fail "no --slices: rc $rc, $(cat "$T/err")"
[ "$(wc -l < "$T/err")" = 1 ] || fail "more than one error line: $(cat "$T/err")"
"$BIN" run $M/prog.hlo --chip v5e --slices 3 --mode timing > "$T/out" 2> "$T/err"
rc=$?
[ "$rc" = 2 ] && grep -Eq "^$M/prog.hlo:[0-9]+:[0-9]+: error: '[a-z.0-9-]+' exchanges between 2 slices .* the run has 3 \(--slices\)" "$T/err" ||
  fail "--slices 3: rc $rc, $(cat "$T/err")"

# step.hlo: an SGD step of a scanned 4-layer bf16 MLP, data parallel over the 2 slices (FSDP
# in each): each layer's gradient shard is all-reduced over DCN inside the backward loop (a
# megascale pair in the while body). The loss is JAX's to the bit; the weights (97 % of them
# moved by the step, by up to 0.056) within a bf16 rounding step of the largest of JAX's.
"$BIN" run $M/step.hlo --slices 2 --chip v5e -i $M/step.ws.npy -i $M/step.x.npy --out-sharding @$M/step.shardings \
  -o "$T/s" --report "$T/s.json" > "$T/out" 2> "$T/err" || fail "step.hlo --slices 2 exited $?: $(cat "$T/err")"
python3 - "$T/s" "$M" "$T/s.json" <<'PY' || fail "step.hlo against JAX's values"
import json, sys, numpy as np
got, want = sys.argv[1], sys.argv[2]
assert np.load(f"{got}/0.npy") == np.load(f"{want}/step.out0.npy")
a, b = np.load(f"{got}/1.npy"), np.load(f"{want}/step.out1.npy")
# bf16 intermediates round differently on the two: within 2^-7 of the largest weight (0.0033;
# measured 0.00195, one rounding step of it), where a gradient without the other slice's half
# would be off by about half the update (which reaches 0.056)
assert a.shape == b.shape and np.abs(a - b).max() <= 2.0 ** -7 * np.abs(b).max(), np.abs(a - b).max()
p = json.load(open(sys.argv[3]))["pod"]
loop = [c for c in p["collectives"] if c.get("dcn_slices") == 2 and c["count"] > 1]
assert loop and loop[0]["kind"] == "all-reduce", p["collectives"]  # one per iteration of the backward loop
PY
# examples/pod/dp2s_tpu.hlo: dp2s's SGD step as libtpu compiled it for two v5e 2x2 slices
# (gradients reduce-scattered in the slice, all-reduced over DCN by the megascale runtime,
# gathered back; the loss all-reduced in the slice, then over DCN): JAX's values.
P=examples/pod
IN=$(sed "s|^|-i $P/|" $P/dp2s.inputs | tr '\n' ' ')
# shellcheck disable=SC2086
"$BIN" run $P/dp2s_tpu.hlo --slices 2 --chip v5e --precision highest $IN --out-sharding @$P/dp2s.shardings -o "$T/d" \
  > "$T/out" 2> "$T/err" || fail "dp2s_tpu.hlo --slices 2 exited $?: $(cat "$T/err")"
for k in 0 1 2; do close "$T/d/$k.npy" $P/dp2s.out$k.npy 1e-5 || fail "dp2s_tpu.hlo result $k differs from JAX's"; done
# Three transfers, as the compiler wrote them: XLA's combiners take all-reduces, never the
# megascale send/recv pairs, so tpusim's combine-collectives leaves them apart (it merged
# the three into one before: "DCN: 1 collective").
grep -Eq "^DCN: 3 collectives span slices; each chip sends 33.28 kB over DCN" "$T/out" ||
  fail "dp2s_tpu DCN transfers (3; 16,384 + 16,384 + 512 bytes per chip, ZeroCrop's tiles): $(grep '^DCN' "$T/out")"
# mpirun: 2 ranks (one per slice) give the one-process bytes.
if command -v mpirun > /dev/null 2>&1; then
  ASAN_OPTIONS="${ASAN_OPTIONS:-}:detect_leaks=0"
  export ASAN_OPTIONS
  MPIRUN="mpirun --oversubscribe"
  [ "$(id -u)" = 0 ] && MPIRUN="$MPIRUN --allow-run-as-root"
  timeout 120 $MPIRUN -n 2 "$BIN" run $M/prog.hlo --slices 2 --chip v5e --precision highest -i $M/x.npy \
    --out-sharding @$M/shardings -o "$T/mpi" > "$T/mout" 2> "$T/err"
  rc=$?
  if grep -q "built without MPI" "$T/err" "$T/mout"; then
    echo "mpirun: tpusim built without MPI"
  elif [ $rc -ne 0 ]; then
    fail "mpirun -n 2 exited $rc: $(tail -3 "$T/err")"
  else
    for k in 0 1 2; do cmp -s "$T/mpi/$k.npy" "$T/m/$k.npy" || fail "mpirun result $k differs from one process"; done
  fi
fi
[ "$fails" = 0 ] || exit 1
