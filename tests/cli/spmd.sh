#!/bin/sh
# tpusim run on JAX's lowered (unpartitioned) sharded programs: partitioned by tpusim over
# the module's mesh (or --mesh); a 70B-shaped two-layer step that needs 160 GB on one chip
# fits each of 16 v5e chips with FSDP; the 3-D data x fsdp x tensor mesh on 128 chips;
# one-line errors.
. tests/cli/lib/preamble.sh
L=examples/spmd/llama70b_2layers.hlo

"$BIN" run $L --mode timing --chip v5e > "$T/out" 2> "$T/err" || fail "FSDP over 16 chips exited $?: $(cat "$T/err")"
grep -q "^spmd-partition: 16 chips (mesh fsdp=16)" "$T/out" || fail "no partition line"
grep -q "^pod: 16 devices" "$T/out" || fail "not run as a pod of 16"
grep -Eq "^memory: each chip holds at most [0-9.]+ GB of its 17.18 GB HBM" "$T/out" || fail "no per-chip memory line"
# over all 16 v5e chips, as the XLA TPU compiler does: the weights and the gradients' partial
# sums pass round the ring (windowed einsum), no chip gathers a whole weight
grep -q "window.permut.*collective-permute" "$T/out" || fail "FSDP over every chip runs no windowed einsum"
grep -q "all-gather" "$T/out" && fail "FSDP over every chip still gathers a weight whole"
"$BIN" run $L --mode timing --chip v5e --no-windowed-einsum > "$T/out2" 2> "$T/err" || fail "--no-windowed-einsum: $(cat "$T/err")"
grep -q "all-gather" "$T/out2" || fail "FSDP gathers no weights"
# 16 v5e chips are a 4x4 slice: the XLA TPU compiler keeps the gradients' all-reduce over
# every chip there, each chip slicing its block (docs/spmd.md, "All-reduce kept")
grep -q "all-reduce" "$T/out2" || fail "FSDP does not all-reduce its gradients over the 4x4 slice"
grep -q "reduce-scatter" "$T/out2" && fail "FSDP reduce-scatters its gradients over the 4x4 slice"
grep -q "collective-permute" "$T/out2" && fail "--no-windowed-einsum still passes weights round the ring"
F=bench/spmd/cases/fsdp_mlp_step/prog.hlo # tpusim compile: the same choice in its spmd-partition pass
"$BIN" compile $F --chip v5e --dump-after spmd-partition | grep -q "window.permute.* collective-permute(" ||
  fail "compile: no windowed einsum over every chip"
"$BIN" compile $F --chip v5e --dump-after spmd-partition --no-windowed-einsum | grep -q "collective-permute(" &&
  fail "compile --no-windowed-einsum: still a ring of permutes"

"$BIN" run $L --mode timing --chip v5e --mesh fsdp=1 > /dev/null 2> "$T/err"
[ $? -eq 2 ] || fail "one chip did not refuse the 160 GB program"
grep -q "error: program needs [0-9]* bytes of HBM; v5e has 17179869184" "$T/err" || fail "HBM message: $(cat "$T/err")"

"$BIN" run $L --mode timing --mesh fsdp=two > /dev/null 2> "$T/err"
[ $? -eq 2 ] || fail "a bad --mesh did not exit 2"
grep -q "error: .*--mesh" "$T/err" || fail "bad mesh message: $(cat "$T/err")"

# The 3-D mesh ('data', 'fsdp', 'tensor') = 8 x 4 x 4 of the reference on a v5p-256 slice
# (128 chips): weights gathered over groups of 4, gradients summed over data x fsdp (32).
"$BIN" run examples/spmd/block_3d.hlo --mode timing --chip v5p --topology v5p-256 --top 0 > "$T/3d" 2> "$T/err" ||
  fail "3-D mesh exited $?: $(cat "$T/err")"
grep -q "^spmd-partition: 128 chips (mesh data=8 fsdp=4 tensor=4)" "$T/3d" || fail "3-D mesh not partitioned"
grep -q "^slice: 4x4x8 (wrap x y z) on v5p" "$T/3d" || fail "3-D mesh slice: $(grep slice "$T/3d")"
grep -Eq "all-gather +4 " "$T/3d" || fail "no all-gather over groups of 4"
grep -Eq "all-reduce +32 " "$T/3d" || fail "no gradient all-reduce over groups of 32"
# each collective is named after the op of the program it serves
grep -Eq "^  dot_general\.[0-9]+\.all-(gather|reduce)" "$T/3d" || fail "collectives not named after their dots: $(grep -A3 '^collectives:' "$T/3d")"

# GSPMD form (no mesh in the module): the mesh is inferred from the shardings; shardings
# that no one mesh expresses are refused with the instruction's location.
cat > "$T/g.hlo" <<'EOF'
HloModule g

ENTRY e {
  a = f32[8,16] parameter(0), sharding={devices=[2,4]<=[8]}
  b = f32[8,16] custom-call(a), custom_call_target="Sharding", sharding={devices=[2,1,4]<=[8] last_tile_dim_replicate}
  ROOT r = f32[8,16] add(b, b)
}
EOF
"$BIN" run "$T/g.hlo" --mode timing > "$T/gout" 2> "$T/err" || fail "GSPMD form exited $?: $(cat "$T/err")"
grep -q "^spmd-partition: 8 chips (mesh d0=2 d1=4)" "$T/gout" || fail "GSPMD mesh: $(head -1 "$T/gout")"
sed 's/devices=\[2,1,4\]<=\[8\] last_tile_dim_replicate/devices=[3,1]<=[3]/' "$T/g.hlo" > "$T/g3.hlo"
"$BIN" run "$T/g3.hlo" --mode timing > /dev/null 2> "$T/err"
[ $? -eq 2 ] || fail "shardings of 8 and 3 devices did not exit 2"
grep -q "g3.hlo:4:.*error: the module's shardings name 8 devices but no mesh" "$T/err" || fail "mesh message: $(cat "$T/err")"

# A convolution split along a spatial dimension: halo exchange (a collective-permute of the
# edge rows each way, edge chips getting zeros = the padding), bit-identical to one chip, with
# and without a batch split beside it.
for sh in "1,4,1,1" "2,2,1,1"; do
  cat > "$T/halo.hlo" <<EOF
HloModule halo

ENTRY e {
  x = f32[2,16,12,3] parameter(0), sharding={devices=[$sh]<=[4]}
  k = f32[3,5,3,8] parameter(1), sharding={replicated}
  ROOT y = f32[2,16,12,8] convolution(x, k), window={size=3x5 pad=1_1x2_2}, dim_labels=b01f_01io->b01f
}
EOF
  "$BIN" compile "$T/halo.hlo" --dump-after spmd-partition > "$T/halo.dump" 2> "$T/err" || fail "halo compile: $(cat "$T/err")"
  [ "$(grep -c ' collective-permute(' "$T/halo.dump")" -eq 2 ] || fail "halo ($sh): not two collective-permutes"
  grep -q "all-gather" "$T/halo.dump" && fail "halo ($sh): gathers the image"
  python3 -c "import numpy as np; r = np.random.RandomState(1); np.save('$T/hx.npy', r.randn(2,16,12,3).astype(np.float32)); np.save('$T/hk.npy', r.randn(3,5,3,8).astype(np.float32))"
  "$BIN" run "$T/halo.hlo" -i "$T/hx.npy" -i "$T/hk.npy" --backend ref -q -o "$T/h4" 2> "$T/err" || fail "halo run: $(cat "$T/err")"
  "$BIN" run "$T/halo.hlo" -i "$T/hx.npy" -i "$T/hk.npy" --backend ref -q --mesh d0=1 -o "$T/h1" 2> "$T/err" || fail "halo one chip: $(cat "$T/err")"
  cmp -s "$T/h4/0.npy" "$T/h1/0.npy" || fail "halo ($sh): values differ from one chip"
  # tpu backend: the halo travels as bf16 (the convolution's one bf16 pass reads it so), values
  # still bit-identical to one chip
  "$BIN" compile "$T/halo.hlo" --dump-after spmd-partition | grep -q "bf16.* collective-permute(" ||
    fail "halo ($sh): not sent as bf16"
  "$BIN" run "$T/halo.hlo" -i "$T/hx.npy" -i "$T/hk.npy" -q -o "$T/t4" 2> "$T/err" || fail "halo tpu: $(cat "$T/err")"
  "$BIN" run "$T/halo.hlo" -i "$T/hx.npy" -i "$T/hk.npy" -q --mesh d0=1 -o "$T/t1" 2> "$T/err" || fail "halo tpu 1: $(cat "$T/err")"
  cmp -s "$T/t4/0.npy" "$T/t1/0.npy" || fail "halo ($sh) tpu: values differ from one chip"
done

# Plans priced with each collective's latency (docs/spmd.md): a data-parallel step's weight
# gradient is summed by an all-reduce that joins the loss's (one collective, as XLA's
# combiner makes it), not by gathering activations; FSDP gathers the weights it uses
# (one combined all-gather) instead of moving activations by all-to-all.
"$BIN" compile tests/pod/cases/dp_sgd_step/prog.hlo --dump-after combine-collectives > "$T/dp" 2> "$T/err" || fail "dp: $(cat "$T/err")"
[ "$(grep -c ' all-reduce(' "$T/dp")" -eq 1 ] || fail "dp step: not one all-reduce"
grep -q " all-gather(" "$T/dp" && fail "dp step: gathers activations"
"$BIN" compile tests/pod/cases/fsdp_step/prog.hlo --dump-after combine-collectives > "$T/fsdp" 2> "$T/err" || fail "fsdp: $(cat "$T/err")"
grep -Eq "\(bf16\[64,32\], bf16\[32,8\]\) all-gather\(" "$T/fsdp" ||
  fail "fsdp step: weights not gathered together (as bf16)"
grep -q " all-to-all(" "$T/fsdp" && fail "fsdp step: moves activations by all-to-all"

# sort (values, and keys with an iota payload: argsort) along an unsplit dimension keeps the
# batch split: no collective, the same values as one chip.
cat > "$T/sort.hlo" <<'EOF'
HloModule sort

lt {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT c = pred[] compare(a, b), direction=LT
}

lt2 {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  i = s32[] parameter(2)
  j = s32[] parameter(3)
  ROOT c = pred[] compare(a, b), direction=LT
}

ENTRY e {
  x = f32[8,16] parameter(0), sharding={devices=[4,1]<=[4]}
  s = f32[8,16] sort(x), dimensions={1}, to_apply=lt
  io = s32[8,16] iota(), iota_dimension=1
  a = (f32[8,16], s32[8,16]) sort(x, io), dimensions={1}, to_apply=lt2
  ai = s32[8,16] get-tuple-element(a), index=1
  ROOT r = (f32[8,16], s32[8,16]) tuple(s, ai)
}
EOF
"$BIN" compile "$T/sort.hlo" --dump-after spmd-partition > "$T/sort.dump" 2> "$T/err" || fail "sort: $(cat "$T/err")"
[ "$(grep -c 'f32\[2,16\].* sort(' "$T/sort.dump")" -eq 2 ] || fail "sort: not sorted per block"
grep -q "all-gather" "$T/sort.dump" && fail "sort: gathers"
python3 -c "import numpy as np; np.save('$T/sx.npy', np.random.RandomState(3).randn(8,16).astype(np.float32))"
"$BIN" run "$T/sort.hlo" -i "$T/sx.npy" --backend ref -q -o "$T/s4" 2> "$T/err" || fail "sort run: $(cat "$T/err")"
"$BIN" run "$T/sort.hlo" -i "$T/sx.npy" --backend ref -q --mesh d0=1 -o "$T/s1" 2> "$T/err" || fail "sort 1: $(cat "$T/err")"
cmp -s "$T/s4/0.npy" "$T/s1/0.npy" && cmp -s "$T/s4/1.npy" "$T/s1/1.npy" || fail "sort: values differ from one chip"

# lax.cond / lax.switch: branches partitioned with their operands' splits; results keep a
# split every branch agrees on (no collective), else they are gathered in each branch.
cat > "$T/cond.hlo" <<'EOF'
HloModule c

tb {
  p = f32[8,16] parameter(0)
  ROOT r = f32[8,16] multiply(p, p)
}

fb {
  p = f32[8,16] parameter(0)
  ROOT r = f32[8,16] negate(p)
}

ENTRY e {
  x = f32[8,16] parameter(0), sharding={devices=[4,1]<=[4]}
  i = s32[] parameter(1), sharding={replicated}
  c = f32[8,16] conditional(i, x, x), branch_computations={tb, fb}
  ROOT o = f32[8,16] add(c, x)
}
EOF
sed 's/ROOT r = f32\[8,16\] negate(p)/ROOT r = f32[8,16] reverse(p), dimensions={0}/' "$T/cond.hlo" > "$T/cond2.hlo"
python3 -c "import numpy as np; np.save('$T/cx.npy', np.random.RandomState(3).randn(8,16).astype(np.float32)); np.save('$T/c0.npy', np.int32(0)); np.save('$T/c1.npy', np.int32(1))"
"$BIN" compile "$T/cond.hlo" --dump-after spmd-partition > "$T/cond.dump" 2> "$T/err" || fail "cond: $(cat "$T/err")"
grep -q "f32\[2,16\] conditional(" "$T/cond.dump" || fail "cond: branches agreeing on a split do not keep it"
grep -q "all-gather" "$T/cond.dump" && fail "cond: gathers although the branches agree"
"$BIN" compile "$T/cond2.hlo" --dump-after spmd-partition > "$T/cond2.dump" 2> "$T/err" || fail "cond2: $(cat "$T/err")"
grep -q "f32\[8,16\] conditional(" "$T/cond2.dump" || fail "cond2: branches that disagree do not give whole results"
for f in cond cond2; do for i in 0 1; do
  "$BIN" run "$T/$f.hlo" -i "$T/cx.npy" -i "$T/c$i.npy" --backend ref -q -o "$T/${f}4" 2> "$T/err" || fail "$f run: $(cat "$T/err")"
  "$BIN" run "$T/$f.hlo" -i "$T/cx.npy" -i "$T/c$i.npy" --backend ref -q --mesh d0=1 -o "$T/${f}1" 2> "$T/err" || fail "$f 1: $(cat "$T/err")"
  cmp -s "$T/${f}4/0.npy" "$T/${f}1/0.npy" || fail "$f branch $i: values differ from one chip"
done; done

# A dot whose partial sums a use wants split over the same axes is priced as the
# reduce-scatter it becomes: pod_block_3d's last projection, added to a residual split over
# tensor, reduce-scatters over tensor instead of gathering its operands (11,008 bytes per
# chip in all, the TPU compiler's program 11,520).
P=tests/tpu/cases/pod_block_3d/prog.hlo
"$BIN" run $P --mode timing --chip v5e --top 0 > "$T/b3" 2> "$T/err" || fail "pod_block_3d: $(cat "$T/err")"
python3 - "$T/b3" <<'PY' || fail "pod_block_3d: $(sed -n '/^collectives:/,/^links/p' "$T/b3")"
import sys
rows, on = [], False
for line in open(sys.argv[1]):
    if line.startswith("collectives:"):
        on = True
        continue
    if on and not line.startswith("  "):
        break
    if on and not line.strip().startswith("op "):
        f = line.split()
        rows.append((f[1], int(f[3]) * float(f[7])))
kinds = sorted(k for k, _ in rows)
assert kinds.count("reduce-scatter") == 1 and kinds.count("all-gather") == 3, kinds
assert sum(b for _, b in rows) <= 11520, rows
PY

# tpusim compile --mesh: the mesh spmd-partition uses for a program that names none (a GSPMD-
# form shard_map manual over y only, as `tpusim run --mesh` would); a bad mesh is one line, 2
G=tests/pod/cases/smap_part_y/prog_gspmd.hlo
"$BIN" compile $G --mesh x=2,y=4 --dump-after spmd-partition > "$T/mesh" 2> "$T/err" || fail "compile --mesh exited $?: $(cat "$T/err")"
grep -q "num_partitions=8" "$T/mesh" || fail "compile --mesh: not partitioned over 8 chips"
"$BIN" compile $G --mesh x=2,y=q --dump-after spmd-partition > "$T/mesh" 2> "$T/err"
[ $? -eq 2 ] && [ ! -s "$T/mesh" ] && grep -q "^<command line>:4:1: error: --mesh 'x=2,y=q'" "$T/err" || fail "bad --mesh: $(cat "$T/err")"

# Gradient accumulation under data parallelism: the gradients' all-reduces leave the loop
# (XLA's WhileLoopAllReduceCodeMotion; one combined all-reduce after it, none in the body),
# values as the reference's run of the unpartitioned program.
GA=examples/spmd/grad_accum.hlo
"$BIN" compile $GA --dump-after combine-collectives > "$T/ga" 2> "$T/err" || fail "compile $GA exited $?: $(cat "$T/err")"
inloop=$(awk '/^ENTRY/ {e = 1} /^}/ {e = 0} !e && / all-reduce\(/' "$T/ga" | wc -l)
after=$(awk '/^ENTRY/ {e = 1} /^}/ {e = 0} e && / all-reduce\(/' "$T/ga" | wc -l)
[ "$inloop" = 0 ] && [ "$after" = 1 ] || fail "$GA: $inloop all-reduces in the loop, $after after it (want 0 and 1)"
python3 -c "
import numpy as np
r = np.random.RandomState(0)
np.save('$T/ga0.npy', (r.randint(-3, 4, (8, 16)) / 8).astype(np.float32))
np.save('$T/ga1.npy', (r.randint(-3, 4, (16, 8)) / 8).astype(np.float32))
np.save('$T/ga2.npy', (r.randint(-3, 4, (4, 32, 8)) / 4).astype(np.float32))"
"$BIN" run $GA -i "$T/ga0.npy" -i "$T/ga1.npy" -i "$T/ga2.npy" -o "$T/ga_tpu" -q 2> "$T/err" || fail "run $GA exited $?: $(cat "$T/err")"
"$BIN" run $GA --backend ref --mesh data=1 -i "$T/ga0.npy" -i "$T/ga1.npy" -i "$T/ga2.npy" -o "$T/ga_ref" -q 2> "$T/err" ||
  fail "ref run of $GA exited $?: $(cat "$T/err")"
python3 -c "
import numpy as np
for i in range(2):
    a, b = np.load('$T/ga_tpu/%d.npy' % i), np.load('$T/ga_ref/%d.npy' % i)
    assert a.shape == b.shape and np.abs(a - b).max() <= 1e-3 * max(1, np.abs(b).max()), (i, np.abs(a - b).max())
" || fail "$GA: partitioned values differ from the reference's"

# The better-plan hint (docs/spmd.md): a data-parallel weight gradient over a small batch is
# all-reduced by XLA's rule (the prediction), where gathering its two small operands moves
# 0.4 % of the bytes; the report says so beside the prediction with the constraints that get
# it, and those constraints written into the program give that plan under XLA's rule. A
# large batch, where XLA's all-reduce is the cheaper plan, gets no hint.
cat > "$T/dpg.hlo" <<'EOF'
HloModule dpgrad

ENTRY e {
  x = f32[16,2048] parameter(0), sharding={devices=[8,1]<=[8]}
  dy = f32[16,2048] parameter(1), sharding={devices=[8,1]<=[8]}
  ROOT g = f32[2048,2048] dot(x, dy), lhs_contracting_dims={0}, rhs_contracting_dims={0}, sharding={replicated}
}
EOF
"$BIN" run "$T/dpg.hlo" --mode timing --chip v5e --top 0 --no-cache --report "$T/dpg.json" > "$T/dpg.out" 2> "$T/err" ||
  fail "dp gradient exited $?: $(cat "$T/err")"
grep -q "^  g.all-reduce .*all-reduce" "$T/dpg.out" || fail "the prediction is not XLA's all-reduce"
grep -Eq "^better plan \(tpusim's own search; the prediction above is XLA's plan\): .* per step \(-[0-9.]+%\)" "$T/dpg.out" ||
  fail "no better-plan hint on a small-batch gradient: $(grep -A2 '^better' "$T/dpg.out")"
grep -q "^  with_sharding_constraint(x, P(None, None))" "$T/dpg.out" || fail "hint: no constraint on x"
grep -q "^  with_sharding_constraint(dy, P(None, None))" "$T/dpg.out" || fail "hint: no constraint on dy"
python3 -c "
import json
b = json.load(open('$T/dpg.json'))['better_plan']
assert b['step_s'] < 0.95 * b['predicted_step_s'] and b['ici_bytes_per_chip'] < 0.1 * b['predicted_ici_bytes_per_chip'], b
assert len(b['constraints']) == 2 and b['constraints'][0].startswith('with_sharding_constraint(x, P(None, None))'), b
" || fail "--report: no better_plan"
# the constraints written into the program: XLA's rule then gives the hinted plan
sed -e 's|^  ROOT g = \(.*\) dot(x, dy)|  xc = f32[16,2048] custom-call(x), custom_call_target="Sharding", sharding={replicated}\
  dyc = f32[16,2048] custom-call(dy), custom_call_target="Sharding", sharding={replicated}\
  ROOT g = \1 dot(xc, dyc)|' "$T/dpg.hlo" > "$T/dpgc.hlo"
"$BIN" run "$T/dpgc.hlo" --mode timing --chip v5e --top 0 --no-cache > "$T/dpgc.out" 2> "$T/err" ||
  fail "constrained gradient exited $?: $(cat "$T/err")"
grep -q "all-reduce" "$T/dpgc.out" && fail "the constrained program still all-reduces"
grep -q "^better plan" "$T/dpgc.out" && fail "the constrained program still has a better plan"
hint=$(sed -n 's/^better plan [^:]*: \([0-9.]* [mun]*s\) per step.*/\1/p' "$T/dpg.out")
got=$(sed -n 's/^pod: 8 chips, one step \([0-9.]* [mun]*s\);.*/\1/p' "$T/dpgc.out")
python3 -c "
u = {'s': 1, 'ms': 1e-3, 'us': 1e-6, 'ns': 1e-9}
h, g = ('$hint'.split(), '$got'.split())
assert len(h) == 2 and len(g) == 2 and abs(float(g[0]) * u[g[1]] / (float(h[0]) * u[h[1]]) - 1) < 0.01
" || fail "the constrained program's step ($got) is not within 1 % of the hint's ($hint)"
sed 's/16,2048/8192,256/g; s/2048,2048/256,256/' "$T/dpg.hlo" > "$T/dpg_big.hlo"
"$BIN" run "$T/dpg_big.hlo" --mode timing --chip v5e --top 0 --no-cache --report "$T/big.json" > "$T/big.out" 2> "$T/err" ||
  fail "large-batch gradient exited $?: $(cat "$T/err")"
grep -q "^  g.all-reduce .*all-reduce" "$T/big.out" || fail "large batch: not XLA's all-reduce"
grep -q "^better plan" "$T/big.out" && fail "a better-plan hint where XLA's all-reduce is the cheaper plan"
python3 -c "import json, sys; sys.exit('better_plan' in json.load(open('$T/big.json')))" || fail "--report: better_plan on the large batch"

[ $fails -eq 0 ] && echo "spmd CLI: all checks passed"
exit $fails
