#!/bin/sh
# combine-collectives runs an all-gather over every device as an all-reduce of each device's
# block written into zeros where the XLA TPU compiler does (docs/spmd.md, "All-gathers run as
# all-reduces"; ag_as_ar.c): on 2-D slices of 64 chips and more up to 16 MiB gathered, on
# 3-D slices of 64 chips and more at any size. 64 v5e chips (8x8) gathering 4 kB and 64 v5p
# chips gathering 32 MiB: all-reduces; 32 v5e chips, and 64 v5e chips gathering 32 MiB:
# all-gathers. Values as the reference back end's. A gather of a value narrowed from f32
# all-reduces the f32 value and narrows the sum.
. tests/cli/lib/preamble.sh
command -v python3 > /dev/null || { echo "skip: no python3"; exit 77; }
# prog N ROWS COLS: f32[ROWS,COLS] (plus the device's number) gathered over all N devices
prog() {
  cat > "$T/g$1_$2.hlo" <<EOF
HloModule g, num_partitions=$1

ENTRY e {
  x = f32[$2,$3] parameter(0)
  pid = u32[] partition-id()
  pf = f32[] convert(pid)
  pb = f32[$2,$3] broadcast(pf), dimensions={}
  xs = f32[$2,$3] add(x, pb)
  ag = f32[$(($1 * $2)),$3] all-gather(xs), channel_id=1, replica_groups=[1,$1]<=[$1], dimensions={0}, use_global_device_ids=true
  ROOT n = f32[$(($1 * $2)),$3] negate(ag)
}
EOF
}
# check CHIP N ROWS COLS WANT (all-reduce or all-gather)
check() {
  prog "$2" "$3" "$4"
  "$BIN" compile "$T/g$2_$3.hlo" --chip "$1" --dump-after combine-collectives > "$T/dump" 2> "$T/err" ||
    { fail "$1 $2 $3x$4: compile exited $?: $(cat "$T/err")"; return; }
  grep -Eq " $5\(" "$T/dump" || fail "$1, $2 devices, $3x$4 each: no $5: $(grep -E 'all-reduce|all-gather' "$T/dump")"
  other=all-gather
  [ "$5" = all-gather ] && other=all-reduce
  grep -Eq " $other\(" "$T/dump" && fail "$1, $2 devices, $3x$4 each: $other left: $(grep -E " $other\(" "$T/dump")"
  :
}
check v5e 64 2 8 all-reduce
check v5p 64 128 1024 all-reduce
check v5e 32 2 8 all-gather
check v5e 64 128 1024 all-gather
python3 -c "
import numpy as np
np.save('$T/x.npy', np.random.RandomState(0).standard_normal((2, 8)).astype(np.float32))" || fail "inputs"
for be in tpu ref; do
  "$BIN" run "$T/g64_2.hlo" --backend $be -i "$T/x.npy" --per-device -o "$T/$be" > /dev/null 2> "$T/err" ||
    fail "$be run exited $?: $(cat "$T/err")"
done
python3 - "$T" <<'EOF' || fail "values differ from the reference back end's"
import sys, numpy as np
t = sys.argv[1]
for d in (0, 1, 17, 63):
    a, b = np.load(f"{t}/tpu/dev{d}/0.npy"), np.load(f"{t}/ref/dev{d}/0.npy")
    assert a.shape == (128, 8) and np.array_equal(a, b), d
EOF
# A gather of a value just narrowed from f32 (ZeRO-1's bf16 copy of its f32 master weights)
# all-reduces the f32 value and narrows the sum, as the compiler's final programs do (an
# all-reduce of f32 operands with a bf16 result): on 64 v5e chips, 2 rows of 8 each.
cat > "$T/n64.hlo" <<HLO
HloModule g, num_partitions=64

ENTRY e {
  x = f32[2,8] parameter(0)
  pid = u32[] partition-id()
  pf = f32[] convert(pid)
  pb = f32[2,8] broadcast(pf), dimensions={}
  xs = f32[2,8] add(x, pb)
  xb = bf16[2,8] convert(xs)
  ag = bf16[128,8] all-gather(xb), channel_id=1, replica_groups=[1,64]<=[64], dimensions={0}, use_global_device_ids=true
  ROOT n = bf16[128,8] negate(ag)
}
HLO
"$BIN" compile "$T/n64.hlo" --chip v5e --dump-after combine-collectives > "$T/ndump" 2> "$T/err" ||
  fail "narrowed gather: compile exited $?: $(cat "$T/err")"
grep -Eq 'f32\[128,8\][^ ]* all-reduce\(' "$T/ndump" && grep -Eq 'bf16\[128,8\][^ ]* convert\(' "$T/ndump" ||
  fail "narrowed gather: not an f32 all-reduce then a convert: $(grep -E 'all-reduce|all-gather|convert' "$T/ndump")"
for be in tpu ref; do
  "$BIN" run "$T/n64.hlo" --backend $be -i "$T/x.npy" --per-device -o "$T/n$be" > /dev/null 2> "$T/err" ||
    fail "narrowed gather: $be run exited $?: $(cat "$T/err")"
done
python3 - "$T" <<'PY' || fail "narrowed gather: values differ from the reference back end's"
import sys, numpy as np
t = sys.argv[1]
for d in (0, 5, 63):
    a, b = np.load(f"{t}/ntpu/dev{d}/0.npy"), np.load(f"{t}/nref/dev{d}/0.npy")
    assert a.shape == (128, 8) and np.array_equal(a, b), d
PY
[ "$fails" = 0 ] || exit 1
