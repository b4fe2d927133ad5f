#!/bin/sh
# Pipeline parallelism: three shard_map + ppermute training steps from JAX over 8 devices
# (examples/pod/ppg GPipe, ppc circular, pp1 1F1B; XLA's SPMD output) run with JAX's values,
# and the summary, report and trace show each pipeline loop's bubble: (P-1)/T of its
# iterations, 2(P-1)/T for a 1F1B loop (forward and backward in every iteration).
. tests/cli/lib/preamble.sh
P=examples/pod
for n in ppg ppc pp1; do
  IN=$(sed "s|^|-i $P/|" $P/$n.inputs | tr '\n' ' ')
  # shellcheck disable=SC2086
  "$BIN" run $P/$n.hlo --backend ref $IN --out-sharding @$P/$n.shardings -o "$T/$n" -q 2> "$T/err" ||
    fail "$n: ref run exited $?: $(cat "$T/err")"
  for k in 0 1; do
    python3 - "$T/$n/$k.npy" "$P/$n.out$k.npy" <<'PY' || fail "$n: result $k differs from JAX's"
import sys, numpy as np
a, b = np.load(sys.argv[1]), np.load(sys.argv[2])
sys.exit(0 if a.shape == b.shape and np.abs(a - b).max() <= 1e-5 * np.abs(b).max() else 1)
PY
  done
done
# GPipe: 4 microbatches through 8 stages, 11 iterations forward and backward, 7 of them
# bubble; circular: 8 microbatches twice round, 23 iterations, 7 of them bubble.
"$BIN" run $P/ppg.hlo --mode timing --chip v5p --report "$T/r.json" --trace "$T/t.json" > "$T/g" 2> "$T/err" ||
  fail "ppg timing exited $?: $(cat "$T/err")"
[ "$(grep -Ec '^pipeline: while.[0-9]+ passes activations round 8 stages \(ppermute.[0-9]+\) in 11 iterations: each stage computes on padding in 7 of them, the bubble: 63.6%' "$T/g")" = 2 ] ||
  fail "GPipe bubble lines: $(grep '^pipeline' "$T/g")"
"$BIN" run $P/ppc.hlo --mode timing --chip v5p > "$T/c" 2> "$T/err" || fail "ppc timing exited $?: $(cat "$T/err")"
[ "$(grep -Ec '^pipeline: .* round 8 stages .* in 23 iterations: .* padding in 7 of them, the bubble: 30.4%' "$T/c")" = 2 ] ||
  fail "circular bubble lines: $(grep '^pipeline' "$T/c")"
python3 - "$T/r.json" "$T/t.json" <<'PY' || fail "report/trace bubble"
import json, sys
pl = json.load(open(sys.argv[1]))["pod"]["pipelines"]
assert len(pl) == 2 and all(p["stages"] == 8 and p["iterations"] == 11 for p in pl), pl
assert all(abs(p["bubble_seconds_per_stage"] - p["loop_seconds"] * 7 / 11) < 1e-12 and p["loop_seconds"] > 0 for p in pl), pl
t = json.load(open(sys.argv[2]))
ev = t["traceEvents"] if isinstance(t, dict) else t
bub = [e for e in ev if e.get("name") == "bubble"]
# every stage of both loops idles 7 iterations: stage s at the first s and the last 7 - s
assert len(bub) == 2 * 8 * 7, len(bub)
tracks = {e["args"]["name"] for e in ev if e.get("ph") == "M" and "bubble" in str(e.get("args", {}).get("name", ""))}
assert len(tracks) == 16, tracks
PY
# 1F1B in one loop (pp1): the forward of microbatch t-s and the backward of t-(2P-2-s) in
# iteration t, activations round the ring, gradients back round the reversed one: one
# pipeline of 8 + 14 = 22 iterations, forward and backward each on padding in 14 of them.
# (Before, its two permutes were two pipelines with 7 of 22, a bubble of 31.8 %.)
"$BIN" run $P/pp1.hlo --mode timing --chip v5p --report "$T/r1.json" --trace "$T/t1.json" > "$T/o" 2> "$T/err" ||
  fail "pp1 timing exited $?: $(cat "$T/err")"
[ "$(grep -c '^pipeline' "$T/o")" = 1 ] &&
  grep -Eq '^pipeline: while.[0-9]+ passes activations round 8 stages \(ppermute.[0-9]+\) and gradients back \(ppermute.[0-9]+\) in 22 iterations: each stage computes on padding in 14 of them \(forward and backward each, 1F1B\), the bubble: 63.6%' "$T/o" ||
  fail "1F1B bubble line: $(grep '^pipeline' "$T/o")"
python3 - "$T/r1.json" "$T/t1.json" <<'PY' || fail "1F1B report/trace bubble"
import json, sys
pl = json.load(open(sys.argv[1]))["pod"]["pipelines"]
assert len(pl) == 1 and pl[0]["iterations"] == 22 and pl[0]["padding_iterations"] == 14 and pl[0]["reverse_permute"], pl
assert abs(pl[0]["bubble_seconds_per_stage"] - pl[0]["loop_seconds"] * 14 / 22) < 1e-12, pl
t = json.load(open(sys.argv[2]))
ev = t["traceEvents"] if isinstance(t, dict) else t
P, M, T = 8, 8, 22
for s in range(P):  # stage s: forward on microbatches in [s, s+M), backward in [2P-2-s, 2P-2-s+M)
    got = [e["name"] for e in ev if e.get("tid") == 2000 + s and e.get("cat") == "pipeline"]
    want = []
    for i in range(T):
        f, b = not s <= i < s + M, not 2 * P - 2 - s <= i < 2 * P - 2 - s + M
        if f or b:
            want.append("bubble" if f and b else "bubble (forward)" if f else "bubble (backward)")
    assert got == want, (s, got, want)
    # half an iteration for each half-idle one: 2(P-1) in all
    assert got.count("bubble") + (got.count("bubble (forward)") + got.count("bubble (backward)")) / 2 == 2 * P - 2
PY
# Not pipelines: a ring of 4 passed round in 4 iterations (a ring algorithm), and chains
# of unequal lengths (0->1->2 beside 3->4) in a loop of 6.
for case in "4 4 {0,1},{1,2},{2,3},{3,0}" "6 6 {0,1},{1,2},{3,4}"; do
  set -- $case
  cat > "$T/np.hlo" <<HLO
HloModule m, num_partitions=$1
c { p = (s32[], f32[8]) parameter(0)
 i = s32[] get-tuple-element(p), index=0
 n = s32[] constant($2)
 ROOT lt = pred[] compare(i, n), direction=LT }
b { p = (s32[], f32[8]) parameter(0)
 i = s32[] get-tuple-element(p), index=0
 x = f32[8] get-tuple-element(p), index=1
 one = s32[] constant(1)
 j = s32[] add(i, one)
 y = f32[8] collective-permute(x), channel_id=1, source_target_pairs={$3}
 ROOT t = (s32[], f32[8]) tuple(j, y) }
ENTRY e { x = f32[8] parameter(0)
 z = s32[] constant(0)
 t = (s32[], f32[8]) tuple(z, x)
 w = (s32[], f32[8]) while(t), condition=c, body=b
 ROOT r = f32[8] get-tuple-element(w), index=1 }
HLO
  "$BIN" run "$T/np.hlo" --mode timing > "$T/np" 2> "$T/err" || fail "np timing exited $?: $(cat "$T/err")"
  grep -q "^pipeline" "$T/np" && fail "reported as a pipeline: $3 over $2 iterations"
  # ... while 5 iterations of the ring are one (4 stages, 1 iteration of bubble each... 3 of 5)
  if [ "$1" = 4 ]; then
    sed "s/constant(4)/constant(5)/" "$T/np.hlo" > "$T/p5.hlo"
    "$BIN" run "$T/p5.hlo" --mode timing > "$T/p5" 2> "$T/err" || fail "p5 timing exited $?"
    grep -q "^pipeline: .* round 4 stages .* in 5 iterations: each stage computes on padding in 3 of them" "$T/p5" ||
      fail "a 4-ring loop of 5 iterations: $(grep '^pipeline' "$T/p5")"
  fi
done
[ "$fails" = 0 ] || exit 1
echo "pipeline: GPipe, circular and 1F1B steps give JAX's values; bubbles 7/11, 7/23 and 14/22"
