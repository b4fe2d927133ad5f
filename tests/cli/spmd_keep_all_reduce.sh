#!/bin/sh
# combine-collectives makes an all-reduce whose only use is each device's own block a
# reduce-scatter, except where its one group is every device of a slice on which the XLA
# TPU compiler keeps the all-reduce (docs/spmd.md, "All-reduce kept"; rs_create.c): the square
# 2-D slices from 4x4 and the 3-D ones. 16 and 64 v5e chips (4x4, 8x8) and 8 v5p chips keep
# it; 8 and 32 v5e chips (2x4, 4x8) and two groups of 8 among 16 v5e chips reduce-scatter.
# Values as the reference back end's either way.
. tests/cli/lib/preamble.sh
command -v python3 > /dev/null || { echo "skip: no python3"; exit 77; }
# prog N GROUPS: f32[N*2,8] summed over GROUPS (one group of every device, or 2 halves),
# each device keeping its rows of the sum (offset from its place in its group)
prog() {
  python3 - "$1" "$2" > "$T/p$1_$2.hlo" <<'EOF'
import sys
n, g = int(sys.argv[1]), sys.argv[2]
if g == "all":
    groups, per, table = "{{%s}}" % ",".join(map(str, range(n))), n, list(range(n))
else:
    h = n // 2
    groups = "{{%s},{%s}}" % (",".join(map(str, range(h))), ",".join(map(str, range(h, n))))
    per, table = h, [i % h for i in range(n)]
rows = 2 * per
print(f"""HloModule k, num_partitions={n}

add {{
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}}

ENTRY e {{
  x = f32[{rows},8] parameter(0)
  pid = u32[] partition-id()
  pf = f32[] convert(pid)
  pb = f32[{rows},8] broadcast(pf), dimensions={{}}
  xs = f32[{rows},8] add(x, pb)
  ar = f32[{rows},8] all-reduce(xs), channel_id=1, replica_groups={groups}, use_global_device_ids=true, to_apply=add
  t = s32[{n}] constant({{{",".join(str(2 * v) for v in table)}}})
  o = s32[1] dynamic-slice(t, pid), dynamic_slice_sizes={{1}}
  os = s32[] reshape(o)
  z = s32[] constant(0)
  ROOT d = f32[2,8] dynamic-slice(ar, os, z), dynamic_slice_sizes={{2,8}}
}}""")
EOF
}
# check CHIP N GROUPS WANT: the dump after combine-collectives holds WANT (all-reduce or
# reduce-scatter) and not the other
check() {
  prog "$2" "$3" || fail "generating the program"
  "$BIN" compile "$T/p$2_$3.hlo" --chip "$1" --dump-after combine-collectives > "$T/dump" 2> "$T/err" ||
    { fail "$1 $2 $3: compile exited $?: $(cat "$T/err")"; return; }
  grep -Eq " $4\(" "$T/dump" || fail "$1, $2 devices, groups $3: no $4: $(grep -E 'all-reduce|reduce-scatter' "$T/dump")"
  other=reduce-scatter
  [ "$4" = reduce-scatter ] && other=all-reduce
  grep -Eq " $other\(" "$T/dump" && fail "$1, $2 devices, groups $3: $other left: $(grep -E " $other\(" "$T/dump")"
  :
}
check v5e 16 all all-reduce
check v5e 64 all all-reduce
check v5p 8 all all-reduce
check v5e 8 all reduce-scatter
check v5e 32 all reduce-scatter
check v5e 16 half reduce-scatter
# values: the kept all-reduce's blocks equal the reference back end's
python3 -c "
import numpy as np
np.save('$T/x.npy', np.random.RandomState(0).standard_normal((32, 8)).astype(np.float32))" || fail "inputs"
for be in tpu ref; do
  "$BIN" run "$T/p16_all.hlo" --backend $be -i "$T/x.npy" --per-device -o "$T/$be" > /dev/null 2> "$T/err" ||
    fail "$be run exited $?: $(cat "$T/err")"
done
python3 - "$T" <<'EOF' || fail "values differ from the reference back end's"
import sys, numpy as np
t = sys.argv[1]
for d in range(16):
    a, b = np.load(f"{t}/tpu/dev{d}/0.npy"), np.load(f"{t}/ref/dev{d}/0.npy")
    assert a.shape == (2, 8) and np.allclose(a, b, rtol=1e-5, atol=1e-5), d
EOF
[ "$fails" = 0 ] || exit 1
