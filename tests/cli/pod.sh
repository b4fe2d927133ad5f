#!/bin/sh
# tpusim run on a partitioned module (examples/pod: XLA's SPMD output for 8 devices):
# global inputs in, global results out by --out-sharding, --per-device shards, timing with
# the ICI unit (same cycles in --mode timing), one-line errors for bad shardings and for
# devices that diverge (no hang). mpirun results: tests/cli/pod_mpi.sh.
. tests/cli/lib/preamble.sh
P=examples/pod
IN="-i $P/mlp.a.npy -i $P/mlp.w.npy"

# shellcheck disable=SC2086
"$BIN" run $P/mlp.hlo --backend ref $IN --out-sharding @$P/mlp.shardings -o "$T/ref" > "$T/out" 2> "$T/err" ||
  fail "ref run exited $?: $(cat "$T/err")"
for pat in "^pod: 8 devices \(1 replica\(s\) x 8 partition\(s\)\)" "^result 0: f32\[16,24\]" "^result 1: f32\[24\]" \
  "^result 2: f32\[\] .*mean -0.0257876"; do
  grep -Eq "$pat" "$T/out" || fail "ref run output lacks /$pat/"
done
[ -s "$T/ref/0.npy" ] && [ -s "$T/ref/2.npy" ] || fail "no global results"

# Without the result shardings the results are stacked, one row per device, with a note.
# shellcheck disable=SC2086
"$BIN" run $P/mlp.hlo --backend ref $IN > "$T/out" 2>&1 || fail "run without shardings exited $?"
grep -q "^result 0: f32\[8,8,6\]" "$T/out" || fail "results not stacked per device: $(grep result "$T/out")"
grep -q "have no sharding" "$T/out" || fail "no note about the missing result shardings"

# --per-device writes each device's shard.
# shellcheck disable=SC2086
"$BIN" run $P/mlp.hlo --backend ref $IN --per-device -o "$T/pd" -q || fail "--per-device exited $?"
for k in 0 7; do [ -s "$T/pd/dev$k/0.npy" ] || fail "no dev$k/0.npy"; done
[ -e "$T/pd/0.npy" ] && fail "--per-device also wrote global results"

# The tpu backend: values, and time with the collectives on ICI; timing mode agrees.
# shellcheck disable=SC2086
"$BIN" run $P/mlp.hlo $IN --out-sharding @$P/mlp.shardings > "$T/full" 2> "$T/err" || fail "tpu run exited $?: $(cat "$T/err")"
grep -q "waiting on ICI [0-9.]*%" "$T/full" || fail "no ICI share in the breakdown"
grep -q "all-reduce" "$T/full" || fail "the all-reduce is not in the profile"
"$BIN" run $P/mlp.hlo --mode timing --report "$T/r.json" > "$T/timing" 2> "$T/err" || fail "timing run exited $?: $(cat "$T/err")"
grep -q '"pod"' "$T/r.json" || fail "the report has no pod section"
grep -q '"kind": "all-reduce"' "$T/r.json" || fail "the report lists no all-reduce"
grep -q '"chips": 8' "$T/r.json" || fail "the report does not give 8 chips"
# Ops named as the user wrote them: JAX op names and source lines from XLA's stack frames.
grep -q "from (JAX op @ source)" "$T/timing" || fail "the profile has no source column"
grep -Eq "ynn_fusion .*dot_general @ gen.py:[0-9]+" "$T/timing" || fail "the dot's fusion is not traced to gen.py"
grep -q '"op_name": "jit(f)/dot_general"' "$T/r.json" || fail "the report lacks op_name"
grep -q '"source_file": ".*gen.py"' "$T/r.json" || fail "the report lacks source_file"
"$BIN" run $P/mlp.hlo --mode timing --trace "$T/t.json" -q || fail "trace run exited $?"
grep -q '"op_name":"jit(f)/tanh"' "$T/t.json" || fail "the trace lacks op names"
grep -q '"name":"ICI groups of 2"' "$T/t.json" || fail "the trace has no collective group track"
grep -q '"name":"link (' "$T/t.json" || fail "the trace has no link tracks"
a=$(grep "^step time:" "$T/full")
b=$(grep "^step time:" "$T/timing")
[ -n "$a" ] && [ "$a" = "$b" ] || fail "timing mode '$b' differs from full mode '$a'"

# The slice: the default for 8 v5e chips, or --topology; its links in the summary.
grep -q "^slice: 2x4 .* on v5e" "$T/full" || fail "no slice line: $(grep slice "$T/full")"
grep -Eq "busiest link|^links: " "$T/full" || fail "no link report"
"$BIN" run $P/mlp.hlo --mode timing --topology 4x2 > "$T/t42" 2> "$T/err" || fail "--topology 4x2 exited $?: $(cat "$T/err")"
grep -q "^slice: 4x2" "$T/t42" || fail "--topology 4x2 not used"
"$BIN" run $P/mlp.hlo --mode timing --topology 4x4 > /dev/null 2> "$T/err"
[ $? -eq 2 ] || fail "a 16-chip topology for an 8-device module did not exit 2"
grep -q "error: .*16" "$T/err" || fail "topology mismatch message: $(cat "$T/err")"
"$BIN" run $P/mlp.hlo --mode timing --topology 4x4x4x4 > /dev/null 2> "$T/err"
[ $? -eq 2 ] || fail "a bad topology did not exit 2"

# Errors: one line, exit 2, no result files.
# shellcheck disable=SC2086
"$BIN" run $P/mlp.hlo --backend ref $IN --out-sharding '{devices=[3]<=[3]}' -o "$T/bad" > /dev/null 2> "$T/err"
[ $? -eq 2 ] || fail "a sharding of the wrong device count did not exit 2"
grep -q "error: .*sharding" "$T/err" || fail "bad sharding message: $(cat "$T/err")"
[ -e "$T/bad" ] && fail "result files written after an error"
# shellcheck disable=SC2086
"$BIN" run $P/mlp.hlo --backend ref $IN --out-sharding '{replicated}' --out-sharding '{replicated}' > /dev/null 2> "$T/err"
[ $? -eq 2 ] || fail "two shardings for three results did not exit 2"
cat > "$T/div.hlo" <<'HLO'
HloModule m, num_partitions=4
add { a = f32[] parameter(0)
 b = f32[] parameter(1)
 ROOT s = f32[] add(a, b) }
yes { x = f32[4] parameter(0)
 ROOT r = f32[4] all-reduce(x), channel_id=1, replica_groups={{0,1,2,3}}, to_apply=add }
no { ROOT x = f32[4] parameter(0) }
ENTRY e {
 p = f32[4] parameter(0)
 i = u32[] partition-id()
 z = u32[] constant(3)
 c = pred[] compare(i, z), direction=LT
 ROOT r = f32[4] conditional(c, p, p), true_computation=yes, false_computation=no
}
HLO
timeout 60 "$BIN" run "$T/div.hlo" --backend ref > /dev/null 2> "$T/err"
[ $? -eq 2 ] || fail "diverging devices did not exit 2"
grep -q "^$T/div.hlo:6:18: error: .*diverged" "$T/err" || fail "divergence message: $(cat "$T/err")"

# The TPU compiler's reduce-scatter: a kCustom fusion of an all-reduce whose result is cut by
# a dynamic-slice. Timed as a reduce-scatter on ICI (each chip sends 3/4 of 4 KiB), values as
# computed (each chip its summed quarter).
cat > "$T/ars.hlo" <<'EOF'
HloModule ars, num_partitions=4

add {
  x = f32[] parameter(0)
  y = f32[] parameter(1)
  ROOT s = f32[] add(x, y)
}

all-reduce-scatter {
  input = f32[64,16] parameter(0)
  ar = f32[64,16] all-reduce(input), channel_id=1, replica_groups={{0,1,2,3}}, use_global_device_ids=true, to_apply=add
  pid = u32[] partition-id()
  p = s32[] convert(pid)
  c16 = s32[] constant(16)
  off = s32[] multiply(p, c16)
  zero = s32[] constant(0)
  ROOT ds = f32[16,16] dynamic-slice(ar, off, zero), dynamic_slice_sizes={16,16}
}

ENTRY e {
  x = f32[64,16] parameter(0)
  ROOT f = f32[16,16] fusion(x), kind=kCustom, calls=all-reduce-scatter
}
EOF
"$BIN" run "$T/ars.hlo" --mode timing --chip v5e > "$T/ars" 2> "$T/err" || fail "fused reduce-scatter exited $?: $(cat "$T/err")"
grep -Eq "^  f +reduce-scatter +4 +1 .* 3072 " "$T/ars" || fail "fused reduce-scatter not timed as one: $(grep -A2 '^collectives' "$T/ars")"
python3 -c "import numpy as np; np.save('$T/x.npy', np.arange(1024, dtype=np.float32).reshape(64, 16))"
"$BIN" run "$T/ars.hlo" -i "$T/x.npy" --backend ref --per-device -o "$T/ars_out" > /dev/null 2> "$T/err" || fail "fused reduce-scatter values: $(cat "$T/err")"
python3 - "$T" <<'EOF' || fail "fused reduce-scatter values differ"
import sys, numpy as np
t = sys.argv[1]
x = np.arange(1024, dtype=np.float32).reshape(64, 16)
for d in range(4):
    got = np.load(f"{t}/ars_out/dev{d}/0.npy")
    assert np.array_equal(got, 4 * x[16 * d:16 * (d + 1)]), d
EOF

# Collectives overlap independent compute (XLA's latency-hiding schedule): the step of a
# permute beside a matmul is the longer of the two, not their sum (--sync-collectives).
cyc() { sed -n 's/^step time: .*(\([0-9]*\) cycles.*/\1/p' "$1"; }
"$BIN" run tests/hlo/pod_overlap.hlo --mode timing --top 0 > "$T/ov" 2> "$T/err" || fail "overlap run exited $?: $(cat "$T/err")"
"$BIN" run tests/hlo/pod_overlap.hlo --mode timing --top 0 --sync-collectives > "$T/sync" 2> "$T/err" ||
  fail "--sync-collectives run exited $?: $(cat "$T/err")"
perm=$(sed -n 's/^  cp  *collective-permute  *[0-9]*  *[0-9]*  *\([0-9.]*\) .*/\1/p' "$T/ov")
mm=$(sed -n 's/^  d  *dot  *[0-9]*  *\([0-9.]*\) .*/\1/p' "$T/sync")
python3 - "$(cyc "$T/ov")" "$(cyc "$T/sync")" "$perm" "$mm" <<'PY' || fail "overlap: step $(cyc "$T/ov") vs sync $(cyc "$T/sync") cycles (permute $perm us, matmul $mm us)"
import sys
ov, sync, perm, mm = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])
us = ov / 1.5e3  # v5e clock
assert mm > 50 and perm > 5 * mm, (perm, mm)            # a long permute, a matmul beside it
assert abs(us - perm) < 0.02 * perm, (us, perm)         # overlapped: the permute alone
assert sync > ov * (1 + 0.8 * mm / perm), (sync, ov)    # in order: both
PY
# The same inside a loop whose permute reads an element of the state (a windowed einsum's
# step): it starts with the iteration, though the operands-first order reaches its
# get-tuple-element after the matmul.
"$BIN" run tests/hlo/pod_overlap_loop.hlo --mode timing --top 0 > "$T/ovl" 2> "$T/err" || fail "loop overlap run exited $?: $(cat "$T/err")"
"$BIN" run tests/hlo/pod_overlap_loop.hlo --mode timing --top 0 --sync-collectives > "$T/syncl" 2> "$T/err" ||
  fail "loop --sync-collectives run exited $?: $(cat "$T/err")"
perm=$(sed -n 's/^  cp  *collective-permute  *[0-9]*  *[0-9]*  *\([0-9.]*\) .*/\1/p' "$T/ovl")
mm=$(sed -n 's/^  d  *dot  *[0-9]*  *\([0-9.]*\) .*/\1/p' "$T/syncl")
python3 - "$(cyc "$T/ovl")" "$(cyc "$T/syncl")" "$perm" "$mm" <<'PY' || fail "loop overlap: step $(cyc "$T/ovl") vs sync $(cyc "$T/syncl") cycles (permutes $perm us, matmuls $mm us)"
import sys
ov, sync, perm, mm = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])
us = ov / 1.5e3
assert mm > 100 and perm > 5 * mm, (perm, mm)           # two iterations of each
assert abs(us - perm) < 0.03 * perm, (us, perm)         # overlapped: the permutes alone
assert sync > ov * (1 + 0.8 * mm / perm), (sync, ov)    # in order: both
PY

# An asynchronous start and the convert only it reads move to the top, ahead of the matmul
# the operands-first order puts first (the planner's next-layer weight prefetch): the step is
# the convert and the gather, the matmul under the gather; in program order, all three.
"$BIN" run tests/hlo/pod_overlap_start.hlo --mode timing --top 0 > "$T/ovs" 2> "$T/err" || fail "start overlap run exited $?: $(cat "$T/err")"
"$BIN" run tests/hlo/pod_overlap_start.hlo --mode timing --top 0 --sync-collectives > "$T/syncs" 2> "$T/err" ||
  fail "start --sync-collectives run exited $?: $(cat "$T/err")"
ag=$(sed -n 's/^  s  *all-gather-start  *[0-9]*  *[0-9]*  *\([0-9.]*\) .*/\1/p' "$T/ovs" | head -1)
cv=$(sed -n 's/^  c  *convert  *[0-9]*  *\([0-9.]*\) .*/\1/p' "$T/ovs")
mm=$(sed -n 's/^  d  *dot  *[0-9]*  *\([0-9.]*\) .*/\1/p' "$T/syncs")
python3 - "$(cyc "$T/ovs")" "$(cyc "$T/syncs")" "$ag" "$cv" "$mm" <<'PY' || fail "start overlap: step $(cyc "$T/ovs") vs sync $(cyc "$T/syncs") cycles (gather $ag us, convert $cv us, matmul $mm us)"
import sys
ov, sync, ag, cv, mm = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4]), float(sys.argv[5])
us = ov / 1.5e3
assert mm > 50 and ag > 3 * mm, (ag, mm)                # a long gather, a matmul beside it
assert abs(us - (cv + ag)) < 0.02 * (cv + ag), (us, cv, ag)  # the matmul under the gather
assert sync > ov * (1 + 0.8 * mm / (cv + ag)), (sync, ov)    # in order: all three
PY

# An all-reduce whose only use is each device's own block becomes a reduce-scatter (XLA's
# reduce-scatter creator), one whose slice is another device's block stays; values equal
# the reference interpreter's run of the program as written.
"$BIN" compile tests/hlo/pod_ar_slice.hlo --dump-after combine-collectives > "$T/ars" 2> "$T/err" ||
  fail "compile pod_ar_slice exited $?: $(cat "$T/err")"
# (the three reduce-scatters of x, all s32, are then combined into one)
[ "$(grep -c '(s32\[4,8\], s32\[4,8\], s32\[4,8\]) reduce-scatter(x, x, x)' "$T/ars")" = 1 ] &&
  [ "$(grep -c ' all-reduce(x)' "$T/ars")" = 1 ] &&
  [ "$(grep -c 's32\[4,8\] negate(' "$T/ars")" = 1 ] && [ "$(grep -c 'f32\[4,8\] convert(' "$T/ars")" = 1 ] ||
  fail "pod_ar_slice: not three s32 reduce-scatters (one negated, one converted on its block) and one all-reduce: $(grep -E 'reduce|negate|convert' "$T/ars")"
python3 -c "import numpy as np; np.save('$T/x.npy', (np.arange(128).reshape(16, 8) * 7 - 300).astype(np.int32))"
"$BIN" run tests/hlo/pod_ar_slice.hlo --backend ref -i "$T/x.npy" -o "$T/ars_ref" -q 2> "$T/err" || fail "ref run exited $?: $(cat "$T/err")"
"$BIN" run tests/hlo/pod_ar_slice.hlo -i "$T/x.npy" -o "$T/ars_tpu" -q 2> "$T/err" || fail "tpu run exited $?: $(cat "$T/err")"
python3 - "$T" <<'PY' || fail "pod_ar_slice: tpu values differ from the reference"
import sys
import numpy as np
t = sys.argv[1]
x = np.arange(128).reshape(16, 8) * 7 - 300
for f, shift, sign in (("0", 0, 1), ("1", 1, 1), ("2", 0, -1), ("3", 0, 1)):
    a, b = np.load(f"{t}/ars_ref/{f}.npy"), np.load(f"{t}/ars_tpu/{f}.npy")
    assert np.array_equal(a, b), f
    for d in range(4):  # device d holds block (d + shift) % 4 of the sum 4x (negated)
        k = (d + shift) % 4
        assert np.array_equal(b[d], sign * 4 * x[4 * k:4 * k + 4]), (f, d)
PY

# All-reduces that only accumulate into a loop's state are sunk after the loop (XLA's
# WhileLoopAllReduceCodeMotion: a gradient-accumulation loop all-reduces once); one whose sum
# the body reads stays. Values equal the reference's and the closed form.
"$BIN" compile tests/hlo/pod_ar_loop.hlo --dump-after combine-collectives > "$T/arl" 2> "$T/err" ||
  fail "compile pod_ar_loop exited $?: $(cat "$T/err")"
body=$(sed -n '/^body {/,/^}/p' "$T/arl")
[ "$(echo "$body" | grep -c ' all-reduce(')" = 1 ] && echo "$body" | grep -q 'ar3 = .* all-reduce(v2)' &&
  grep -q 'f32\[4,8\] all-reduce(r1)' "$T/arl" && grep -q 'f32\[4,8\] all-reduce(r2)' "$T/arl" ||
  fail "pod_ar_loop: not one all-reduce left in the body (ar3) and two after the loop: $(grep -E 'all-reduce' "$T/arl")"
python3 -c "import numpy as np; np.save('$T/a.npy', (np.arange(32).reshape(4, 8) % 5).astype(np.float32)); \
np.save('$T/x.npy', (np.arange(32).reshape(4, 8) % 7 - 3).astype(np.float32))"
"$BIN" run tests/hlo/pod_ar_loop.hlo --backend ref -i "$T/a.npy" -i "$T/x.npy" -o "$T/arl_ref" -q 2> "$T/err" ||
  fail "ref run exited $?: $(cat "$T/err")"
"$BIN" run tests/hlo/pod_ar_loop.hlo -i "$T/a.npy" -i "$T/x.npy" -o "$T/arl_tpu" -q 2> "$T/err" || fail "tpu run exited $?: $(cat "$T/err")"
python3 - "$T" <<'PY' || fail "pod_ar_loop: tpu values differ from the reference or the closed form"
import sys
import numpy as np
t = sys.argv[1]
a0, x = np.load(f"{t}/a.npy").astype(np.float64), np.load(f"{t}/x.npy").astype(np.float64)
v = lambda i, p: x * (i + 1) + p
full = sum(v(i, p) for i in range(3) for p in range(4))
pair = [sum(v(i, p) for i in range(3) for p in g) for g in ((0, 1), (2, 3))]
for f, want in (("0", lambda d: a0 + full), ("1", lambda d: pair[d // 2]), ("2", lambda d: full)):
    a, b = np.load(f"{t}/arl_ref/{f}.npy"), np.load(f"{t}/arl_tpu/{f}.npy")
    assert np.array_equal(a, b), f
    for d in range(4):
        assert np.array_equal(b[d], want(d)), (f, d)
PY

# Reduce-scatters that only accumulate are sunk too (XLA's WhileLoopAllReduceCodeMotion with
# reduce-scatters): the loop sums the whole value and reduce-scatters once after it.
"$BIN" compile tests/hlo/pod_rs_loop.hlo --dump-after combine-collectives > "$T/rsl" 2> "$T/err" ||
  fail "compile pod_rs_loop exited $?: $(cat "$T/err")"
body=$(sed -n '/^body {/,/^}/p' "$T/rsl")
[ "$(echo "$body" | grep -c ' reduce-scatter(')" = 1 ] && echo "$body" | grep -q 'rs3 = .* reduce-scatter(v2)' &&
  echo "$body" | grep -q 'parameter(0)' && echo "$body" | grep 'parameter(0)' | grep -q 'f32\[8,8\], f32\[8,8\], f32\[2,8\]' &&
  grep -q 'f32\[2,8\] reduce-scatter(r1)' "$T/rsl" && grep -q 'f32\[8,4\] reduce-scatter(r2)' "$T/rsl" ||
  fail "pod_rs_loop: not one reduce-scatter left in the body (rs3), whole state, two after the loop: $(grep -E 'reduce-scatter|parameter\(0\)' "$T/rsl")"
# A loop that runs once sinks nothing: XLA's WhileLoopSimplifier removes it before the motion
# (the inline pass: its body inlined), so its reduce-scatters run once on the values
# themselves, none on a summed state after a loop.
sed 's/n = s32\[\] constant(3)/n = s32[] constant(1)/' tests/hlo/pod_rs_loop.hlo > "$T/rs1.hlo"
"$BIN" compile "$T/rs1.hlo" --dump-after combine-collectives > "$T/rsl1" 2> "$T/err" || fail "compile rs1 exited $?: $(cat "$T/err")"
entry1=$(sed -n '/^ENTRY/,/^}/p' "$T/rsl1")
[ "$(echo "$entry1" | grep -c ' while(')" = 0 ] && echo "$entry1" | grep -q ' reduce-scatter(v2' &&
  ! grep -q 'reduce-scatter(r[12])' "$T/rsl1" ||
  fail "pod_rs_loop with one trip: the loop not inlined, or reduce-scatters sunk from it: $(grep -E 'while|reduce-scatter' "$T/rsl1")"
python3 -c "import numpy as np; np.save('$T/a.npy', (np.arange(16).reshape(2, 8) % 5).astype(np.float32)); \
np.save('$T/x.npy', (np.arange(64).reshape(8, 8) % 7 - 3).astype(np.float32))"
"$BIN" run tests/hlo/pod_rs_loop.hlo --backend ref -i "$T/a.npy" -i "$T/x.npy" -o "$T/rsl_ref" -q 2> "$T/err" ||
  fail "ref run exited $?: $(cat "$T/err")"
"$BIN" run tests/hlo/pod_rs_loop.hlo -i "$T/a.npy" -i "$T/x.npy" -o "$T/rsl_tpu" -q 2> "$T/err" || fail "tpu run exited $?: $(cat "$T/err")"
python3 - "$T" <<'PY' || fail "pod_rs_loop: tpu values differ from the reference or the closed form"
import sys
import numpy as np
t = sys.argv[1]
a0, x = np.load(f"{t}/a.npy").astype(np.float64), np.load(f"{t}/x.npy").astype(np.float64)
v = lambda i, p: x * (i + 1) + p
full = [sum(v(i, p) for p in range(4)) for i in range(3)]
pair = [sum(v(i, p) for i in range(3) for p in g) for g in ((0, 1), (2, 3))]
want = (lambda d: a0 + sum(full)[2 * d:2 * d + 2],
        lambda d: pair[d // 2][:, 4 * (d % 2):4 * (d % 2) + 4],
        lambda d: sum(f[2 * d:2 * d + 2] ** 2 for f in full))
for f, w in zip("012", want):
    a, b = np.load(f"{t}/rsl_ref/{f}.npy"), np.load(f"{t}/rsl_tpu/{f}.npy")
    assert np.array_equal(a, b), f
    for d in range(4):
        assert np.array_equal(b[d], w(d)), (f, d, b[d], w(d))
PY

# Collectives on disjoint kinds of link (x and y of a 2x4 slice) run side by side.
"$BIN" run tests/hlo/pod_lanes.hlo --mode timing --top 0 > "$T/lanes" 2> "$T/err" || fail "pod_lanes exited $?: $(cat "$T/err")"
rx=$(sed -n 's/^  rx  *all-reduce  *[0-9]*  *[0-9]*  *\([0-9.]*\) .*/\1/p' "$T/lanes" | head -1)
ry=$(sed -n 's/^  ry  *all-reduce  *[0-9]*  *[0-9]*  *\([0-9.]*\) .*/\1/p' "$T/lanes" | head -1)
python3 - "$(cyc "$T/lanes")" "$rx" "$ry" <<'PY' || fail "pod_lanes: step $(cyc "$T/lanes") cycles, all-reduces $rx and $ry us"
import sys
cyc, rx, ry = int(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3])
us = cyc / 1.5e3
assert rx > 100 and ry > 100, (rx, ry)
assert abs(us - max(rx, ry)) < 0.02 * max(rx, ry), (us, rx, ry)  # side by side, not rx + ry
PY
"$BIN" compile tests/hlo/pod_lanes.hlo > "$T/lanes.asm" 2> "$T/err" || fail "compile pod_lanes exited $?"
grep -q "ici .* links=3 " "$T/lanes.asm" && grep -q "ici .* links=12 " "$T/lanes.asm" ||
  fail "pod_lanes: the all-reduces do not name their links (x: 3, y: 12): $(grep ici "$T/lanes.asm")"

[ $fails -eq 0 ] && echo "pod CLI: all checks passed"
exit $fails
