#!/bin/sh
# combine-collectives' rewrites of collectives (docs/spmd.md). It moves type conversions across the collectives that only move data, as
# XLA's CollectiveQuantizer (docs/spmd.md): an f32 all-gather whose result (reshaped) is cast
# to bf16 gathers the bf16 value; a bf16 value cast to f32 and then permuted is permuted as
# bf16 and cast after. Values as the reference back end's run of the program as written.
. tests/cli/lib/preamble.sh
cat > "$T/q.hlo" <<'EOF'
HloModule q, num_partitions=4

ENTRY e {
  x = f32[8,16] parameter(0)
  pid = u32[] partition-id()
  pf = f32[] convert(pid)
  pb = f32[8,16] broadcast(pf), dimensions={}
  xs = f32[8,16] add(x, pb)
  ag = f32[32,16] all-gather(xs), channel_id=1, replica_groups={{0,1,2,3}}, dimensions={0}, use_global_device_ids=true
  r = f32[32,2,8] reshape(ag)
  n = bf16[32,2,8] convert(r)
  y = f32[8,16] parameter(1)
  yy = f32[8,16] multiply(y, pb)
  ys = bf16[8,16] convert(yy)
  w = f32[8,16] convert(ys)
  cp = f32[8,16] collective-permute(w), channel_id=2, source_target_pairs={{0,1},{1,2},{2,3},{3,0}}
  ROOT t = (bf16[32,2,8], f32[8,16]) tuple(n, cp)
}
EOF
"$BIN" compile "$T/q.hlo" --dump-after combine-collectives > "$T/dump" 2> "$T/err" || fail "compile exited $?: $(cat "$T/err")"
grep -Eq "= bf16\[32,16\][^ ]* all-gather\(" "$T/dump" || fail "the all-gather still moves f32: $(grep all-gather "$T/dump")"
grep -Eq "= bf16\[8,16\][^ ]* collective-permute\(" "$T/dump" ||
  fail "the collective-permute still moves f32: $(grep collective-permute "$T/dump")"
grep -Eq "f32\[[0-9,]*\][^ ]* (all-gather|collective-permute)\(" "$T/dump" && fail "an f32 collective is left"
"$BIN" run "$T/q.hlo" --mode timing --chip v5e > "$T/time" 2> "$T/err" || fail "timing exited $?: $(cat "$T/err")"
# bf16: 3 blocks of 256 B gathered, one of 256 B permuted (2.048 kB as f32)
grep -q "each chip sends 1.024 kB over ICI" "$T/time" || fail "bytes per chip: $(grep 'each chip sends' "$T/time")"
python3 -c "
import numpy as np
r = np.random.RandomState(0)
np.save('$T/x.npy', r.standard_normal((8, 16)).astype(np.float32))
np.save('$T/y.npy', r.standard_normal((8, 16)).astype(np.float32))" || fail "inputs"
for be in tpu ref; do
  "$BIN" run "$T/q.hlo" --backend $be -i "$T/x.npy" -i "$T/y.npy" --per-device -o "$T/$be" > /dev/null 2> "$T/err" ||
    fail "$be run exited $?: $(cat "$T/err")"
done
python3 - "$T" <<'EOF' || fail "values differ from the reference back end's"
import sys, numpy as np
t = sys.argv[1]
for d in range(4):
    for i in range(2):
        a, b = np.load(f"{t}/tpu/dev{d}/{i}.npy"), np.load(f"{t}/ref/dev{d}/{i}.npy")
        assert a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a, b), (d, i)
EOF

# A repeated all-gather (same value, groups and dimension, another channel id; one of them
# through a reshape adding a size-1 dimension) is done once, as XLA's
# ScheduleAwareCollectiveOpsCSE; one along another dimension stays. Values as the reference's.
cat > "$T/cse.hlo" <<'EOF'
HloModule cse, num_partitions=4

ENTRY e {
  x = f32[8,16] parameter(0)
  pid = u32[] partition-id()
  pf = f32[] convert(pid)
  pb = f32[8,16] broadcast(pf), dimensions={}
  xs = f32[8,16] add(x, pb)
  a1 = f32[32,16] all-gather(xs), channel_id=1, replica_groups={{0,1,2,3}}, dimensions={0}, use_global_device_ids=true
  t1 = f32[32,16] tanh(a1)
  xr = f32[8,16,1] reshape(xs)
  xb = f32[8,16] reshape(xr)
  a2 = f32[32,16] all-gather(xb), channel_id=2, replica_groups={{0,1,2,3}}, dimensions={0}, use_global_device_ids=true
  s = f32[32,16] add(t1, a2)
  a3 = f32[8,64] all-gather(xs), channel_id=3, replica_groups={{0,1,2,3}}, dimensions={1}, use_global_device_ids=true
  ROOT t = (f32[32,16], f32[8,64]) tuple(s, a3)
}
EOF
"$BIN" compile "$T/cse.hlo" --dump-after combine-collectives > "$T/dump2" 2> "$T/err" || fail "compile cse exited $?: $(cat "$T/err")"
# (kept, the two would be combined into one all-gather of a tuple of both)
[ "$(grep -c ' all-gather(' "$T/dump2")" = 2 ] && [ "$(grep -Ec '= f32\[32,16\][^ ]* all-gather\(' "$T/dump2")" = 1 ] ||
  fail "repeated all-gather not dropped: $(grep ' all-gather(' "$T/dump2")"
for be in tpu ref; do
  "$BIN" run "$T/cse.hlo" --backend $be -i "$T/x.npy" --per-device -o "$T/cse_$be" > /dev/null 2> "$T/err" ||
    fail "cse $be run exited $?: $(cat "$T/err")"
done
python3 - "$T" <<'EOF' || fail "cse: values differ from the reference back end's"
import sys, numpy as np
t = sys.argv[1]
for d in range(4):
    for i in range(2):
        a, b = np.load(f"{t}/cse_tpu/dev{d}/{i}.npy"), np.load(f"{t}/cse_ref/dev{d}/{i}.npy")
        assert a.shape == b.shape and np.abs(a - b).max() <= 1e-6, (d, i)
EOF
# The same groups written in another form (an iota list, the groups in another order: the
# compiler's partitioning writes one gather of a weight each way) are the same collective;
# the devices of a group in another order are not (the gathered blocks would be in another
# order).
cat > "$T/cse_groups.hlo" <<'EOF'
HloModule cse_groups, num_partitions=8

ENTRY e {
  x = f32[8,16] parameter(0)
  a1 = f32[32,16] all-gather(x), channel_id=1, replica_groups={{0,2,4,6},{1,3,5,7}}, dimensions={0}, use_global_device_ids=true
  t1 = f32[32,16] tanh(a1)
  a2 = f32[32,16] all-gather(x), channel_id=2, replica_groups=[2,4]<=[4,2]T(1,0), dimensions={0}, use_global_device_ids=true
  s2 = f32[32,16] add(t1, a2)
  a3 = f32[32,16] all-gather(x), channel_id=3, replica_groups={{1,3,5,7},{0,2,4,6}}, dimensions={0}, use_global_device_ids=true
  s3 = f32[32,16] add(s2, a3)
  a4 = f32[32,16] all-gather(x), channel_id=4, replica_groups={{0,4,2,6},{1,5,3,7}}, dimensions={0}, use_global_device_ids=true
  ROOT s4 = f32[32,16] add(s3, a4)
}
EOF
"$BIN" compile "$T/cse_groups.hlo" --dump-after combine-collectives > "$T/dump3" 2> "$T/err" ||
  fail "compile cse_groups exited $?: $(cat "$T/err")"
[ "$(grep -c ' all-gather(' "$T/dump3")" = 2 ] && grep -q 'replica_groups={{0,4,2,6},{1,5,3,7}}' "$T/dump3" ||
  fail "all-gathers over the same groups in other forms not done once: $(grep ' all-gather(' "$T/dump3")"
[ "$fails" = 0 ] || exit 1
