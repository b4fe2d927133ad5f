#!/bin/sh
# A spatially split convolution's kernel gradient (the window spans the image; the result is
# the kernel's taps) is partitioned as XLA's partitioner does: each chip correlates its rows,
# with its neighbours' edge rows (the halo), against its rows of dy, and the partial kernels
# are summed as XLA's convolution handler sums them: over the examples' split first, then
# over the spatial split (two all-reduces, one per level of its partitioning, as in the
# compiler's conv_spatial_step programs of bench/spmd/corpus); the image is not gathered.
# Values as one chip's.
. tests/cli/lib/preamble.sh
cat > "$T/kg.hlo" <<'EOF'
HloModule kgrad

ENTRY e {
  x = f32[2,32,8,4] parameter(0), sharding={devices=[2,4,1,1]<=[8]}
  dy = f32[2,32,8,6] parameter(1), sharding={devices=[2,4,1,1]<=[8]}
  ROOT g = f32[3,3,4,6] convolution(x, dy), window={size=32x8 pad=1_1x1_1}, dim_labels=f01b_i01o->01bf, sharding={replicated}
}
EOF
"$BIN" compile "$T/kg.hlo" --dump-after spmd-partition > "$T/part" 2> "$T/err" || fail "partition exited $?: $(cat "$T/err")"
grep -q " all-gather(" "$T/part" && fail "the image is gathered: $(grep ' all-gather(' "$T/part")"
[ "$(grep -c ' all-reduce(' "$T/part")" = 2 ] || fail "not two all-reduces of the kernel: $(grep ' all-reduce(' "$T/part")"
[ "$(grep -Ec "= f32\[3,3,4,6\][^ ]* all-reduce\(" "$T/part")" = 2 ] || fail "the all-reduces are not the kernel's"
grep ' all-reduce(' "$T/part" | sed -n 1p | grep -q 'replica_groups={{0,4},{1,5},{2,6},{3,7}}' ||
  fail "the first all-reduce is not over the examples' split: $(grep ' all-reduce(' "$T/part" | sed -n 1p)"
grep ' all-reduce(' "$T/part" | sed -n 2p | grep -q 'replica_groups={{0,1,2,3},{4,5,6,7}}' ||
  fail "the second all-reduce is not over the spatial split: $(grep ' all-reduce(' "$T/part" | sed -n 2p)"
[ "$(grep -c ' collective-permute(' "$T/part")" = 2 ] || fail "no halo exchange each way"
python3 -c "
import numpy as np
r = np.random.RandomState(0)
np.save('$T/x.npy', r.randint(-3, 4, (2, 32, 8, 4)).astype(np.float32))
np.save('$T/dy.npy', r.randint(-3, 4, (2, 32, 8, 6)).astype(np.float32))" || fail "inputs"
"$BIN" run "$T/kg.hlo" -i "$T/x.npy" -i "$T/dy.npy" -o "$T/tpu" -q 2> "$T/err" || fail "run exited $?: $(cat "$T/err")"
"$BIN" run "$T/kg.hlo" --backend ref --mesh d=1 -i "$T/x.npy" -i "$T/dy.npy" -o "$T/ref" -q 2> "$T/err" ||
  fail "one-chip reference run exited $?: $(cat "$T/err")"
python3 - "$T" <<'EOF' || fail "values differ from one chip's"
import sys, numpy as np
t = sys.argv[1]
a, b = np.load(f"{t}/tpu/0.npy"), np.load(f"{t}/ref/0.npy")
x, dy = np.load(f"{t}/x.npy"), np.load(f"{t}/dy.npy")
xp = np.pad(x, ((0, 0), (1, 1), (1, 1), (0, 0)))
want = np.zeros((3, 3, 4, 6), np.float32)
for i in range(3):
    for j in range(3):
        want[i, j] = np.einsum("nhwc,nhwo->co", xp[:, i:i + 32, j:j + 8], dy)
assert a.shape == want.shape and np.array_equal(b, want), "reference"
assert np.array_equal(a, want), np.abs(a - want).max()
EOF
[ "$fails" = 0 ] || exit 1
