#!/bin/sh
# tpusim plan --slices K: the data axis runs over K slices joined by DCN (the generated
# step's gradient all-reduce spans them); candidates count K x the slice's chips, report
# their DCN time beside ICI's, and the figures are what `tpusim run --slices K` gives the
# same program.
. tests/cli/lib/preamble.sh
D=tests/cli/plan
"$BIN" plan $D/tiny.json --chips v5p --slice 4 --slices 2 --data 1 --fsdp 4 --micro 1 --remat on --json > "$T/p.json" \
  2> "$T/err" || fail "plan --slices 2 exited $?: $(cat "$T/err")"
"$BIN" plan $D/tiny.json --chips v5p --slice 4 --slices 2 --data 1 --fsdp 4 --micro 1 --remat on > "$T/p.txt" \
  2> "$T/err" || fail "plan --slices 2 (text) exited $?"
grep -Eq "^  1 v5p-8 x2 +8 1x4x1 " "$T/p.txt" || fail "the table lacks the 2-slice candidate: $(sed -n 6p "$T/p.txt")"
grep -q "^  #1 over 2 slices: its collectives take .* s per step over DCN" "$T/p.txt" || fail "no DCN line"
python3 - "$T/p.json" "$BIN" "$T" <<'PY' || fail "the 2-slice candidate's figures"
import json, os, subprocess, sys
sys.path.insert(0, "tools/plan")
import gen
c = json.load(open(sys.argv[1]))["candidates"]
assert len(c) == 1, c
c = c[0]
assert c["chips"] == 8 and c["slices"] == 2 and c["slice"] == "v5p-8 x2" and c["dcn_s"] > 0 and c["ici_s"] > 0, c
m = json.load(open("tests/cli/plan/tiny.json"))
m.update(dtype="bf16", optimizer="adam", experts=0)
st = gen.Step(m, {"data": 1, "fsdp": 4, "tensor": 1, "micro": 1, "remat": True, "slices": 2, "windowed": False})
assert st.N == 8 and st.b == 32 // 8, (st.N, st.b)  # 32 sequences over data (2 slices x 1) x fsdp 4
hlo, rep = os.path.join(sys.argv[3], "s.hlo"), os.path.join(sys.argv[3], "s.json")
open(hlo, "w").write(st.module())
subprocess.run([sys.argv[2], "run", hlo, "--mode", "timing", "--chip", "v5p", "--slices", "2", "-q", "--report", rep],
               check=True)
p = json.load(open(rep))["pod"]
assert abs(p["dcn_seconds"] - c["dcn_s"]) < 1e-12 and abs(p["ici_seconds"] - c["ici_s"]) < 1e-12, (p, c)
assert abs(json.load(open(rep))["step"]["seconds"] - c["step_s"]) < 1e-12
PY
# PaLM's mesh: 12-way tensor with 4 sequences of 2,048 per chip (8,192 tokens per microbatch,
# not a multiple of 12). The residual stream is kept split over tensor along d_model
# (MaxText's activation_embed), so the tokens need not divide by it: a multi-query SwiGLU
# model of that kind, 256 tokens per chip over tensor 3, is a valid 2-slice candidate.
"$BIN" plan $D/mq_tiny.json --chips v4 --slice 12 --slices 2 --data 1 --fsdp 4 --tensor 3 --micro 1 --remat full \
  --json > "$T/mq.json" 2> "$T/err" || fail "plan mq_tiny exited $?: $(cat "$T/err")"
python3 - "$T/mq.json" <<'PY' || fail "the tensor-3 candidate with 256 tokens per microbatch"
import json, re, sys
sys.path.insert(0, "tools/plan")
import gen
d = json.load(open(sys.argv[1]))
assert len(d["candidates"]) == 1 and not d["not_fit"], d["not_fit"]
c = d["candidates"][0]
assert c["status"] == "ok" and c["chips"] == 24 and c["dcn_s"] > 0 and c["mfu"] > 0, c
m = json.load(open("tests/cli/plan/mq_tiny.json"))
m.update(dtype="bf16", optimizer="adam", experts=0)
st = gen.Step(m, {"data": 1, "fsdp": 4, "tensor": 3, "micro": 1, "remat": "full", "slices": 2, "windowed": False})
assert st.Tm == 256 and st.check() is None, (st.Tm, st.check())
assert st.saved()["x"][0] == (256, 128), st.saved()  # this chip's 384 / 3 columns of every token
hlo = st.module()
ag = [l for l in hlo.splitlines() if "all-gather(L.x)" in l]
assert len(ag) == 1 and "bf16[256,384]" in ag[0] and "dimensions={1}" in ag[0], ag
PY
# --ignore-hbm times a candidate that does not fit: it keeps its DCN and ICI time too.
"$BIN" plan $D/fat.json --chips v5e --slice 4 --slices 2 --data 1 --fsdp 4 --tensor 1 --micro 1 --remat on \
  --ignore-hbm --json > "$T/fat.json" 2> "$T/err"
python3 -c "
import json, sys
r = json.load(open(sys.argv[1]))['not_fit']
assert len(r) == 1 and r[0]['status'] == 'no-fit' and r[0]['step_s'] > 0 and r[0]['dcn_s'] > 0 and r[0]['ici_s'] > 0, r
" "$T/fat.json" || fail "--ignore-hbm over 2 slices: $(head -c 600 "$T/fat.json")"
"$BIN" plan $D/tiny.json --slices 0 > /dev/null 2> "$T/err"
[ $? -eq 2 ] && grep -q "error: --slices must be at least 1, not 0" "$T/err" || fail "--slices 0: $(cat "$T/err")"
[ "$fails" = 0 ] || exit 1
echo "plan --slices: 2 slices of 4 v5p chips, DCN beside ICI as tpusim run gives them"
