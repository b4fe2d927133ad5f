#!/bin/sh
# tpusim plan's training step as MaxText runs it: grouped-query attention (kv_heads) in the
# model file, FLOP count and program; MaxText's remat policies by name (what each saves, the
# offloading ones in host memory S(5)); the train state donated (input_output_alias), and
# tpusim's HBM verdict from its argument / output / alias / temp bytes. Needs python3.
. tests/cli/lib/preamble.sh
command -v python3 > /dev/null 2>&1 || { echo "SKIP: no python3"; exit 77; }
D=tests/cli/plan

# Grouped-query attention: 2 KV heads for 8 query heads. Parameters and model FLOPs as
# MaxText counts them; the plan runs at a pinned mesh.
"$BIN" plan $D/gqa.json --chips v5e --slice 8 --data 1 --fsdp 4 --tensor 2 --micro 1 --remat on --json \
  > "$T/g.json" 2> "$T/err" || fail "GQA plan exited $?: $(cat "$T/err")"
python3 - "$T/g.json" > "$T/chk" 2>&1 << 'PY' || fail "GQA checks: $(cat "$T/chk")"
import json, sys
j = json.load(open(sys.argv[1]))
L, D, H, KV, hd, F, V, S = 2, 1024, 8, 2, 128, 2816, 4096, 512
per = D * (H + 2 * KV) * hd + H * hd * D + 3 * D * F
assert j["params"] == L * per + 2 * D * V, j["params"]
assert j["model_flops_per_token"] == 6 * (L * per + D * V) + 12 * S * H * hd * L, j["model_flops_per_token"]
assert j["candidates"] and j["candidates"][0]["step_s"] > 0, j["candidates"][:1]
PY
check_err() { # file pattern
  "$BIN" plan "$1" > "$T/out" 2> "$T/err"
  rc=$?
  [ $rc -eq 2 ] || fail "$1: exit $rc, not 2"
  [ "$(wc -l < "$T/err")" -eq 1 ] && grep -Eq "$2" "$T/err" || fail "$1: error is '$(cat "$T/err")', not /$2/"
}
check_err $D/badkv.json "^$D/badkv.json:3:[0-9]+: error: heads 4 is not a multiple of kv_heads 3"

# The step programs of each policy (gen.py), compiled by tpusim: what each saves, and the
# HBM it takes. More saved -> more temp bytes; the offloading policy's stacks in S(5).
python3 - "$BIN" > "$T/chk" 2>&1 << 'PY' || fail "remat policies: $(cat "$T/chk")"
import json, re, subprocess, sys, tempfile
sys.path.insert(0, "tools/plan")
import gen, plan
m = plan.load_model("tests/cli/plan/gqa.json")
mem = {}
for pol in ("full", "save_qkv_proj", "save_dot_except_mlp", "minimal", "minimal_offloaded", "off"):
    st = gen.Step(m, {"data": 1, "fsdp": 4, "tensor": 2, "micro": 1, "remat": pol})
    want = {"full": set(), "save_qkv_proj": {"qkv"}, "save_dot_except_mlp": {"qkv", "x1"},
            "minimal": {"qkv", "x1", "up"}, "minimal_offloaded": {"qkv", "x1", "up"},
            "off": {"qkv", "mx", "sm", "ctx", "x1", "up", "act"}}[pol]
    assert set(st.saved()) == want | {"x"}, (pol, st.saved())
    text = st.module()
    assert ("S(5)" in text) == (pol == "minimal_offloaded"), pol
    assert "input_output_alias" in text.splitlines()[0], "train state not donated"
    with tempfile.NamedTemporaryFile("w", suffix=".hlo") as fh:
        fh.write(text); fh.flush()
        r = subprocess.run([sys.argv[1], "compile", fh.name, "--emit", "asm", "--chip", "v5p"], capture_output=True, text=True)
    assert r.returncode == 0, (pol, r.stderr)
    f = {k: int(v) for k, v in re.findall(r"(hbm_\w+|host_temp)=(\d+)", r.stdout)}
    assert f["hbm_alias"] == f["hbm_out"], (pol, f)  # every output donated
    assert f["hbm_footprint"] >= f["hbm_arg"] + f["hbm_temp"], (pol, f)
    mem[pol] = f
print({p: (f["hbm_temp"], f.get("host_temp", 0)) for p, f in mem.items()})
t = {p: f["hbm_temp"] for p, f in mem.items()}
# (off keeps the most, but recomputes nothing: the backward's temporaries are fewer than
# minimal's, which recomputes the attention)
assert t["full"] < t["save_qkv_proj"] < t["save_dot_except_mlp"] < t["minimal"] and t["full"] < t["off"], t
assert mem["minimal_offloaded"].get("host_temp", 0) > 0 and t["minimal_offloaded"] < t["minimal"], mem
PY
[ "$fails" = 0 ] || exit 1
