#!/bin/sh
# Collective Pallas kernels on a pod (docs/pallas.md): jax.experimental.pallas.ops.tpu's
# all_gather (remote DMAs around a ring, the barrier semaphore, signals to other devices)
# inside shard_map, on 4 and 8 simulated chips — every device's result equals Pallas's TPU
# interpret mode on both back ends; --mode timing prices its remote DMAs on the ICI links on
# v5e, v5p and v6e; the Pallas distributed guide's right-permute (a remote copy between ANY
# refs) and a ring all-reduce over one axis of a 2x4 mesh (device ids as mesh coordinates)
# and a copy two devices to the right give interpret mode's global results; remote DMAs
# take their hops from the slice's topology; over MPI ranks (each rank running every
# device's kernel) the values equal interpret mode's and its timing runs; a kernel whose barrier is never met fails
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

# A pod split over MPI ranks: each rank runs every device's kernel on the operands the
# exchange brings (remote DMAs find their targets), keeps its own devices' results, and the
# values equal interpret mode's (2 and 3 ranks: an uneven split); timing runs too; a kernel
# that hangs fails with one line in every rank instead of hanging.
if command -v mpirun > /dev/null 2>&1; then
  MPIRUN="mpirun --oversubscribe"
  [ "$(id -u)" = 0 ] && MPIRUN="$MPIRUN --allow-run-as-root"
  AG=$C/all_gather_f32_4dev_32x128
  # shellcheck disable=SC2086
  ASAN_OPTIONS="${ASAN_OPTIONS:-}:detect_leaks=0" timeout 120 $MPIRUN -n 2 "$BIN" run $AG/prog.hlo -q > "$T/out" 2> "$T/err"
  if ! grep -q "built without MPI" "$T/err" "$T/out"; then
    for np in 2 3; do
      for c in all_gather_f32_4dev_32x128 ring_allreduce_f32_2x4dev_16x512; do
        rm -rf "$T/o"
        PER=""
        case $c in all_gather*) PER=--per-device ;; esac
        # shellcheck disable=SC2086
        ASAN_OPTIONS="${ASAN_OPTIONS:-}:detect_leaks=0" timeout 120 $MPIRUN -n $np "$BIN" run $C/$c/prog.hlo \
          -i $C/$c/in0.npy --backend tpu $PER -o "$T/o" -q > "$T/out" 2> "$T/err" ||
          fail "$c over $np MPI ranks exited $?: $(head -2 "$T/err")"
        python3 - "$C/$c/interp.npy" "$T/o" "$c" <<'EOF2' || fail "$c over $np MPI ranks: values differ from interpret mode"
import glob, sys
import numpy as np
want = np.load(sys.argv[1])
if sys.argv[3].startswith("all_gather"):  # every device holds the whole gathered array
    got = sorted(glob.glob(sys.argv[2] + "/dev*/0.npy"))
    assert len(got) == 4, got
    for f in got:
        assert np.array_equal(np.load(f).reshape(want.shape), want), f
else:  # the global result, assembled by the run
    assert np.array_equal(np.load(sys.argv[2] + "/0.npy"), want)
EOF2
      done
    done
    # shellcheck disable=SC2086
    ASAN_OPTIONS="${ASAN_OPTIONS:-}:detect_leaks=0" timeout 120 $MPIRUN -n 2 "$BIN" run $AG/prog.hlo --mode timing \
      --no-cache > "$T/out" 2> "$T/err" || fail "timing over MPI ranks exited $?: $(head -2 "$T/err")"
    python3 - $AG/prog.hlo "$T/hang_mpi.hlo" <<'EOF2'
import re, sys
s = open(sys.argv[1]).read()
s = re.sub(r"\\n *op tpu\.sem_signal [^\\]*", "", s, count=1)
open(sys.argv[2], "w").write(s)
EOF2
    # shellcheck disable=SC2086
    ASAN_OPTIONS="${ASAN_OPTIONS:-}:detect_leaks=0" timeout 120 $MPIRUN -n 2 "$BIN" run "$T/hang_mpi.hlo" \
      -i $AG/in0.npy -q > "$T/out" 2> "$T/err"
    rc=$?
    [ "$rc" = 1 ] || [ "$rc" = 2 ] || fail "a kernel that hangs over MPI ranks exited $rc"
    grep -q "error: .*the kernel would hang" "$T/err" || fail "no hang diagnosis over MPI: $(head -2 "$T/err")"
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
