#!/bin/sh
# tpusim plan --pipeline P: the generated step pipelines the layers over P stages (GPipe, as
# a shard_map + ppermute loop compiles per chip), and the planner reports the bubble.
# 1. Values: the pipelined step (8 layers over 4 stages, 4 or 8 microbatches, fsdp 2: 8
#    chips; GPipe, and circular with 2 repeats: stage s holds layers s and 4 + s) and the
#    same step without a pipeline (2 chips) give the same parameter updates from the same
#    weights, on the reference backend (each stage's chips hold its layers' rows), within 5e-4 of the largest update in f32 (the order of the sums differs: the same
#    step with 4 microbatches against 8, unpipelined, differs by 4e-5). With more microbatches
#    than stages a stage-0 gradient sent back to the last stage would reach a real iteration,
#    and a circular pipeline keeps the last stage's outputs in a buffer until stage 0 is free.
# 2. Planning: the candidate's bubble is (P-1)/(M+P-1) of the pipeline loops, as tpusim run
#    reports it on the same program, and a stage count that does not divide the layers or is
#    below 1 is refused.
. tests/cli/lib/preamble.sh
D=tests/cli/plan
for case in "full 4 1" "off 8 1" "off 4 2" "full 8 2"; do
  set -- $case
  python3 - "$BIN" "$T" "$@" > "$T/v" 2> "$T/err" <<'PY' || fail "pipelined values (remat, microbatches, repeats: $*): $(tail -3 "$T/err")"
import json, os, subprocess, sys
import numpy as np
sys.path.insert(0, "tools/plan")
import gen
tpusim, tmp = sys.argv[1], sys.argv[2]
m = {"name": "pv", "layers": 8, "d_model": 64, "heads": 2, "head_dim": 32, "mlp": 128, "vocab": 128, "seq": 16,
     "batch_tokens": 256, "train_tokens": 1e6, "dtype": "f32", "optimizer": "sgd", "experts": 0, "mlp_kind": "gelu"}
F, M, P, V = 2, int(sys.argv[4]), 4, int(sys.argv[5])
base = {"data": 1, "fsdp": F, "tensor": 1, "micro": M, "remat": sys.argv[3], "windowed": False}
flat, pipe = gen.Step(m, base), gen.Step(m, dict(base, pipeline=P, repeats=V))
assert flat.check() is None and pipe.check() is None
r = np.random.RandomState(0)
def params(st):
    lws = {k: st.shard(s, fd) for k, (s, fd) in st.lw.items()}
    gws = {k: st.shard(s, fd) for k, (s, fd) in st.gw.items()}
    return lws, gws
lws, gws = params(flat)
ids = r.randint(0, m["vocab"], size=(F, M, flat.Tm, 1)).astype(np.int32)
W = {k: (r.randn(F, m["layers"], *s) * 0.05).astype(np.float32) for k, s in lws.items()}
G = {k: (r.randn(F, *s) * 0.05).astype(np.float32) for k, s in gws.items()}
def run(st, name, per_dev):
    path = os.path.join(tmp, name + ".hlo")
    open(path, "w").write(st.module())
    args = []
    for k, a in enumerate(per_dev):
        f = os.path.join(tmp, f"{name}.in{k}.npy")
        np.save(f, a)
        args += ["-i", f]
    out = os.path.join(tmp, name)
    subprocess.run([tpusim, "run", path, "--backend", "ref", "-q", "--per-device", "-o", out] + args, check=True)
    return [[np.load(os.path.join(out, f"dev{d}", f"{k}.npy")) for k in range(len(W) + len(G))] for d in range(st.N)]
flat_in = [ids] + [W[k] for k in lws] + [G[k] for k in gws]
dev = [d % F for d in range(pipe.N)]
stg = [d // F for d in range(pipe.N)]
Ls = m["layers"] // (P * V)
# stage s holds layers (r P + s) Ls + k of every repeat r, as rows r Ls + k
rows = [[(r * P + s) * Ls + k for r in range(V) for k in range(Ls)] for s in range(P)]
pipe_in = [ids[dev]] + [np.stack([W[k][dev[d], rows[stg[d]]] for d in range(pipe.N)]) for k in lws] + \
          [G[k][dev] for k in gws]
fo, po = run(flat, "flat", flat_in), run(pipe, "pipe", pipe_in)
worst = 0.0
for d in range(pipe.N):
    f, s = dev[d], stg[d]
    for k, nm in enumerate(list(lws) + list(gws)):
        want = fo[f][k][rows[s]] if nm in lws else fo[f][k]
        base_ = W[nm][f][rows[s]] if nm in lws else G[nm][f]
        got = po[d][k]
        # the update (lr x gradient) of each parameter, pipelined against not
        du, dw = got - base_, want - base_
        assert np.abs(dw).max() > 0, nm
        err = np.abs(du - dw).max() / np.abs(dw).max()
        worst = max(worst, err)
        assert err < 5e-4, (d, nm, err)
print(f"pipelined updates match the flat step's: worst relative error {worst:.2e}")
PY
done
"$BIN" plan $D/pp8.json --chips v5p --slice 8 --data 1 --fsdp 2 --tensor 1 --pipeline 4 --micro 4 --remat full --json \
  > "$T/p.json" 2> "$T/err" || fail "plan --pipeline 4 exited $?: $(cat "$T/err")"
"$BIN" plan $D/pp8.json --chips v5p --slice 8 --data 1 --fsdp 2 --tensor 1 --pipeline 4 --remat full > "$T/p.txt" \
  2> "$T/err" || fail "plan --pipeline 4 (text) exited $?"
grep -Eq "^  1 v5p-16 +8 1x2x1 p4 " "$T/p.txt" || fail "the table lacks the pipelined candidate: $(sed -n 6p "$T/p.txt")"
grep -Eq "^  #1 pipelines 4 stages over [0-9]+ microbatches: .* the bubble [0-9.]+ % of the pipeline loops" "$T/p.txt" ||
  fail "no bubble line: $(grep '#1' "$T/p.txt")"
python3 - "$T/p.json" "$BIN" "$T" <<'PY' || fail "the pipelined candidate's figures"
import json, os, subprocess, sys
sys.path.insert(0, "tools/plan")
import gen
c = json.load(open(sys.argv[1]))["candidates"]
assert len(c) == 1, c
c = c[0]
assert c["pipeline"] == 4 and c["micro"] == 4 and c["chips"] == 8, c
assert abs(c["bubble"] - 3 / 7) < 1e-12 and c["bubble_s"] > 0, c
m = json.load(open("tests/cli/plan/pp8.json"))
m.update(dtype="bf16", optimizer="adam", experts=0)
st = gen.Step(m, {"data": 1, "fsdp": 2, "tensor": 1, "micro": 4, "remat": "full", "pipeline": 4, "windowed": False})
assert st.N == 8 and st.L == 2 and st.Tp == 7, (st.N, st.L, st.Tp)
hlo, rep = os.path.join(sys.argv[3], "s.hlo"), os.path.join(sys.argv[3], "s.json")
open(hlo, "w").write(st.module())
subprocess.run([sys.argv[2], "run", hlo, "--mode", "timing", "--chip", "v5p", "-q", "--report", rep], check=True)
j = json.load(open(rep))
pl = j["pod"]["pipelines"]
assert len(pl) == 2 and all(p["stages"] == 4 and p["iterations"] == 7 for p in pl), pl
assert abs(sum(p["bubble_seconds_per_stage"] for p in pl) - c["bubble_s"]) < 1e-12
assert abs(j["step"]["seconds"] - c["step_s"]) < 1e-12
PY
# 1F1B (--pipeline-schedule 1f1b), timed as one SPMD 1F1B loop (examples/pod/pp1) from the
# GPipe program: T = M + 2(P - 1) iterations, each one forward and one backward iteration of
# the GPipe loops (M + P - 1 iterations each), so the step is GPipe's plus P - 1 = 3 more
# iterations of both loops (= GPipe's bubble seconds), the bubble 6/T and twice GPipe's
# seconds; the peak is the GPipe program's less the saved activations of the M + 3 -
# min(M, 2P - 1) iterations never in flight (2 layers a stage): 7 - 4 with 4 microbatches,
# 11 - 7 with 8.
"$BIN" plan $D/pp8.json --chips v5p --slice 8 --data 1 --fsdp 2 --tensor 1 --pipeline 4 --micro 4 --remat full \
  --pipeline-schedule 1f1b --json > "$T/f.json" 2> "$T/err" || fail "plan --pipeline-schedule 1f1b exited $?: $(cat "$T/err")"
"$BIN" plan $D/pp8.json --chips v5p --slice 8 --data 1 --fsdp 2 --tensor 1 --pipeline 4 --micro 8 --remat full \
  --pipeline-schedule 1f1b --json > "$T/f8.json" 2> "$T/err" || fail "plan --pipeline-schedule 1f1b --micro 8 exited $?"
"$BIN" plan $D/pp8.json --chips v5p --slice 8 --data 1 --fsdp 2 --tensor 1 --pipeline 4 --micro 8 --remat full \
  --json > "$T/g8.json" 2> "$T/err" || fail "plan --pipeline 4 --micro 8 exited $?"
python3 - "$T/p.json" "$T/f.json" "$T/g8.json" "$T/f8.json" <<'PY' || fail "the 1F1B candidate against GPipe's"
import json, math, sys
sys.path.insert(0, "tools/plan")
import gen
g, f, g8, f8 = (json.load(open(x))["candidates"][0] for x in sys.argv[1:5])
assert g["schedule"] == g8["schedule"] == "gpipe" and f["schedule"] == f8["schedule"] == "1f1b", (g, f)
assert g["timed"] == "generated-program" and f["timed"] == f8["timed"] == "1f1b-from-gpipe-loops", (g, f)
for gg, ff, M in ((g, f, 4), (g8, f8, 8)):
    assert ff["micro"] == gg["micro"] == M and gg["iterations"] == M + 3 and ff["iterations"] == M + 6, (gg, ff)
    assert abs(gg["bubble"] - 3 / (M + 3)) < 1e-12 and abs(ff["bubble"] - 6 / (M + 6)) < 1e-12, (gg, ff)
    assert gg["bubble_s"] > 0 and abs(ff["bubble_s"] - 2 * gg["bubble_s"]) < 1e-9 * gg["bubble_s"], (gg, ff)
    assert abs(ff["step_s"] - gg["step_s"] - gg["bubble_s"]) < 1e-9 * gg["step_s"], (gg, ff)
    assert abs(ff["hw_util"] * ff["step_s"] - gg["hw_util"] * gg["step_s"]) < 1e-9, (gg, ff)
m = json.load(open("tests/cli/plan/pp8.json"))
m.update(dtype="bf16", optimizer="adam", experts=0)
for gg, ff, M, held in ((g, f, 4, 4), (g8, f8, 8, 7)):
    st = gen.Step(m, {"data": 1, "fsdp": 2, "tensor": 1, "micro": M, "remat": "full", "pipeline": 4, "windowed": False})
    row = sum(math.prod(s) * (2 if dt == "bf16" else 4) for s, dt in st.saved().values())
    assert row > 0 and ff["hbm_saved_1f1b"] == row * 2 * (M + 3 - held), (row, ff)
    assert gg["hbm_peak"] - ff["hbm_peak"] == row * 2 * (M + 3 - held), (gg, ff)
    assert ff["held_iterations"] == held and gg["held_iterations"] == M + 3, (gg, ff)
PY
"$BIN" plan $D/pp8.json --chips v5p --slice 8 --data 1 --fsdp 2 --tensor 1 --pipeline 4 --micro 4 --remat full \
  --pipeline-schedule 1f1b > "$T/f.txt" 2> "$T/err"
grep -q "^  #1 pipelines 4 stages (1F1B) over 4 microbatches: every stage computes on padding in 6 of 10 iterations, the bubble 60.0 % .*; 1F1B: a stage holds at most 4 microbatches' activations, [0-9.]* [kMG]B less than the GPipe program; timed as one SPMD 1F1B loop from the GPipe program's forward and backward iterations" "$T/f.txt" ||
  fail "1F1B line: $(grep '#1 pipelines' "$T/f.txt")"
for bad in "1f1b --pipeline-repeats 2" "circular"; do
  # shellcheck disable=SC2086
  "$BIN" plan $D/pp8.json --pipeline 4 --pipeline-schedule $bad > /dev/null 2> "$T/err"
  [ $? -eq 2 ] && grep -q "error: a circular schedule takes --pipeline-repeats 2 or more, and only it does" "$T/err" ||
    fail "--pipeline-schedule $bad: $(cat "$T/err")"
done
# Circular, 2 repeats: 4 x 2 + 3 iterations, 3 of them bubble; the table names it p4x2.
"$BIN" plan $D/pp8.json --chips v5p --slice 8 --data 1 --fsdp 2 --tensor 1 --pipeline 4 --pipeline-repeats 2 --micro 4 \
  --remat full > "$T/c.txt" 2> "$T/err" || fail "plan --pipeline-repeats 2 exited $?: $(cat "$T/err")"
grep -Eq "^  1 v5p-16 +8 1x2x1 p4x2 " "$T/c.txt" || fail "no circular candidate: $(sed -n 6p "$T/c.txt")"
grep -q "^  #1 pipelines 4 stages (2 repeats, circular) over 4 microbatches: every stage computes on padding in 3 of 11 iterations, the bubble 27.3 %" "$T/c.txt" ||
  fail "circular bubble line: $(grep '#1' "$T/c.txt")"
"$BIN" plan $D/pp8.json --chips v5p --slice 8 --pipeline 4 --pipeline-repeats 3 --json > "$T/r3.json" 2> "$T/err"
python3 -c "import json,sys; d=json.load(open(sys.argv[1])); assert not d['candidates'] and not d['not_fit'], d" "$T/r3.json" ||
  fail "--pipeline 4 --pipeline-repeats 3 over 8 layers gave a candidate"
"$BIN" plan $D/pp8.json --pipeline-repeats 0 > /dev/null 2> "$T/err"
[ $? -eq 2 ] && grep -q "error: --pipeline-repeats must be at least 1, not 0" "$T/err" || fail "--pipeline-repeats 0: $(cat "$T/err")"
# Pipeline stages over DCN (--dcn-axis pipeline, MaxText's dcn_pipeline_parallelism): 2
# slices of 4 chips, 2 stages in each: 4 stages, the program the 4-stage one in one slice is,
# its permutes between stages 1 and 2 (and 3 and 0) over DCN, timed as tpusim run --slices 2.
"$BIN" plan $D/pp8.json --chips v5p --slice 4 --slices 2 --dcn-axis pipeline --data 1 --fsdp 2 --tensor 1 --pipeline 2 \
  --micro 4 --remat full --json > "$T/d.json" 2> "$T/err" || fail "plan --dcn-axis pipeline exited $?: $(cat "$T/err")"
python3 - "$T/d.json" "$BIN" "$T" <<'PY' || fail "the candidate pipelined over 2 slices"
import json, os, subprocess, sys
sys.path.insert(0, "tools/plan")
import gen
c = json.load(open(sys.argv[1]))["candidates"]
assert len(c) == 1, c
c = c[0]
assert c["dcn"] == "pipeline" and c["pipeline"] == 2 and c["slices"] == 2 and c["chips"] == 8, c
assert abs(c["bubble"] - 3 / 7) < 1e-12 and c["dcn_s"] > 0, c
m = json.load(open("tests/cli/plan/pp8.json"))
m.update(dtype="bf16", optimizer="adam", experts=0)
k = {"data": 1, "fsdp": 2, "tensor": 1, "micro": 4, "remat": "full", "windowed": False}
st = gen.Step(m, dict(k, pipeline=2, slices=2, dcn="pipeline"))
assert st.P == 4 and st.R == 1 and st.module() == gen.Step(m, dict(k, pipeline=4)).module()
assert gen.Step(m, dict(k, data=2, pipeline=2, slices=2, dcn="pipeline")).check() == \
    "pipeline stages over DCN take data 1 in each slice"
hlo, rep = os.path.join(sys.argv[3], "d.hlo"), os.path.join(sys.argv[3], "dr.json")
open(hlo, "w").write(st.module())
subprocess.run([sys.argv[2], "run", hlo, "--mode", "timing", "--chip", "v5p", "--slices", "2", "-q", "--report", rep],
               check=True)
j = json.load(open(rep))
assert abs(j["pod"]["dcn_seconds"] - c["dcn_s"]) < 1e-12 and abs(j["step"]["seconds"] - c["step_s"]) < 1e-12, (j["pod"], c)
PY
"$BIN" plan $D/pp8.json --chips v5p --slice 8 --pipeline 3 --json > "$T/p3.json" 2> "$T/err"
python3 -c "import json,sys; d=json.load(open(sys.argv[1])); assert not d['candidates'] and not d['not_fit'], d" "$T/p3.json" ||
  fail "--pipeline 3 over 8 layers gave a candidate"
"$BIN" plan $D/pp8.json --pipeline 0 > /dev/null 2> "$T/err"
[ $? -eq 2 ] && grep -q "error: --pipeline must be at least 1, not 0" "$T/err" || fail "--pipeline 0: $(cat "$T/err")"
[ "$fails" = 0 ] || exit 1
echo "plan --pipeline: pipelined updates match the flat step's; bubble (P-1)/(MV+P-1) as tpusim run gives it; stages over DCN"
