#!/bin/sh
# Collective Pallas kernels on a pod (docs/pallas.md): jax.experimental.pallas.ops.tpu's
# all_gather (remote DMAs around a ring, the barrier semaphore, signals to other devices)
# inside shard_map, on 4 and 8 simulated chips — every device's result equals Pallas's TPU
# interpret mode on both back ends; --mode timing prices its remote DMAs on the ICI links on
# v5e, v5p and v6e; the Pallas distributed guide's right-permute (a remote copy between ANY
# refs) and a ring all-reduce over one axis of a 2x4 mesh (device ids as mesh coordinates)
# and a copy two devices to the right give interpret mode's global results; remote DMAs
# take their hops from the slice's topology; over MPI ranks a collective kernel's values
# are refused with one line and its timing runs; a kernel whose barrier is never met fails
# with one line instead of hanging. Needs numpy for the comparisons (exit 77 = skipped without it).
. tests/cli/lib/preamble.sh
python3 -c "import numpy" 2>/dev/null || { echo "numpy missing: skipped"; exit 77; }
C=bench/pallas/corpus

for c in all_gather_f32_4dev_32x128 all_gather_bf16_8dev_128x256; do
  for b in ref tpu; do
    rm -rf "$T/o"
    "$BIN" run $C/$c/prog.hlo -i $C/$c/in0.npy --backend $b --per-device -o "$T/o" -q > "$T/out" 2>&1 ||
      fail "$c ($b) exited $?: $(cat "$T/out")"
    python3 - "$C/$c/interp.npy" "$T/o" <<'EOF' || fail "$c ($b): values differ from interpret mode"
import glob, sys
import numpy as np
want = np.load(sys.argv[1])
got = sorted(glob.glob(sys.argv[2] + "/dev*/0.npy"))
assert len(got) in (4, 8), got
for f in got:
    g = np.load(f).reshape(want.shape)
    assert np.array_equal(g, want), (f, float(np.abs(g - want).max()))
EOF
  done
done

for c in right_permute_f32_4dev_32x128 permute_by2_f32_4dev_32x128 ring_allreduce_f32_2x4dev_16x512; do
  for b in ref tpu; do
    rm -rf "$T/o"
    "$BIN" run $C/$c/prog.hlo -i $C/$c/in0.npy --backend $b -o "$T/o" -q > "$T/out" 2>&1 ||
      fail "$c ($b) exited $?: $(cat "$T/out")"
    python3 -c "import sys, numpy as np; sys.exit(not np.array_equal(np.load('$T/o/0.npy'), np.load('$C/$c/interp.npy')))" ||
      fail "$c ($b): values differ from interpret mode"
  done
  "$BIN" run $C/$c/prog.hlo --mode timing --chip v6e > "$T/out" 2>&1 || fail "$c: timing exited $?: $(cat "$T/out")"
done

# Timing: each chip sends 3 steps x 2 directions x half its 8x128 f32 shard (2 KiB) = 12 KiB.
for chip in v5e v5p v6e; do
  "$BIN" run $C/all_gather_f32_4dev_32x128/prog.hlo --mode timing --chip $chip > "$T/out" 2>&1 ||
    fail "timing on $chip exited $?: $(cat "$T/out")"
  grep -q "each chip sends 12.29 kB over ICI" "$T/out" || fail "$chip: remote DMA bytes: $(grep 'over ICI' "$T/out")"
  grep -q "waiting on ICI" "$T/out" || fail "$chip: no ICI wait in the breakdown"
done

# Remote DMAs on the pod's routes: device 0's copy to device 2 is one hop on a 2x2 slice,
# two on a 1x4 line (no wraparound on v5e's short axes): one more hop's latency (1 us).
P2=$C/permute_by2_f32_4dev_32x128/prog.hlo
"$BIN" run $P2 --mode timing --chip v5e --topology 2x2 --no-cache --report "$T/sq.json" -q > "$T/out" 2>&1 ||
  fail "permute by 2 on 2x2 exited $?: $(cat "$T/out")"
"$BIN" run $P2 --mode timing --chip v5e --topology 1x4 --no-cache --report "$T/line.json" -q > "$T/out" 2>&1 ||
  fail "permute by 2 on 1x4 exited $?: $(cat "$T/out")"
python3 - "$T/sq.json" "$T/line.json" <<'EOF' || fail "permute by 2: a 1x4 line is not one hop slower than 2x2"
import json, sys
a, b = (json.load(open(f))["step"] for f in sys.argv[1:3])
extra = (b["cycles"] - a["cycles"]) / a["clock_hz"]
assert abs(extra - 1e-6) < 0.02e-6, extra
EOF

# A pod split over MPI ranks refuses a collective kernel with one line (each rank holds only
# its own devices' buffers); timing needs no values and runs.
if command -v mpirun > /dev/null 2>&1; then
  MPIRUN="mpirun --oversubscribe"
  [ "$(id -u)" = 0 ] && MPIRUN="$MPIRUN --allow-run-as-root"
  AG=$C/all_gather_f32_4dev_32x128
  # shellcheck disable=SC2086
  ASAN_OPTIONS="${ASAN_OPTIONS:-}:detect_leaks=0" timeout 120 $MPIRUN -n 2 "$BIN" run $AG/prog.hlo -i $AG/in0.npy -q \
    > "$T/out" 2> "$T/err"
  rc=$?
  if ! grep -q "built without MPI" "$T/err" "$T/out"; then
    [ "$rc" != 0 ] || fail "a collective kernel over MPI ranks did not fail"
    grep -q "error: device [0-9]*: Pallas kernel 'ag_kernel' talks to other devices.*not split over MPI ranks" "$T/err" ||
      fail "MPI refusal: $(head -2 "$T/err")"
    # shellcheck disable=SC2086
    ASAN_OPTIONS="${ASAN_OPTIONS:-}:detect_leaks=0" timeout 120 $MPIRUN -n 2 "$BIN" run $AG/prog.hlo --mode timing \
      --no-cache > "$T/out" 2> "$T/err" || fail "timing over MPI ranks exited $?: $(head -2 "$T/err")"
  fi
fi

# Without one of the two barrier signals every device waits for a signal that never comes.
python3 - $C/all_gather_f32_4dev_32x128/prog.hlo "$T/hang.hlo" <<'EOF'
import re, sys
s = open(sys.argv[1]).read()
s = re.sub(r"\\n *op tpu\.sem_signal [^\\]*", "", s, count=1)
open(sys.argv[2], "w").write(s)
EOF
"$BIN" run "$T/hang.hlo" -i $C/all_gather_f32_4dev_32x128/in0.npy -q > "$T/out" 2>&1
rc=$?
[ "$rc" = 2 ] || [ "$rc" = 1 ] || fail "a kernel that hangs exited $rc"
grep -q "the kernel would hang" "$T/out" || fail "no hang diagnosis: $(cat "$T/out")"
[ "$(grep -c error: "$T/out")" = 1 ] || fail "not one error line: $(cat "$T/out")"

[ "$fails" = 0 ] || exit 1
