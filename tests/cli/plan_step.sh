#!/bin/sh
# tpusim plan's training step as MaxText runs it: grouped-query attention (kv_heads) in the
# model file, FLOP count and program; MaxText's remat policies by name (what each saves, the
# offloading ones in host memory S(5)); the train state donated (input_output_alias), and
# tpusim's HBM verdict from its argument / output / alias / temp bytes; flash attention's
# values against the materialised scores'; a step of one microbatch without accumulators. Needs python3.
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
# HBM it takes. More saved -> more temp bytes; the offloading policy's stacks in S(5). With
# attention as fusions ("kernel": "fusion"): the library's Pallas kernels (the default here)
# add their own buffers to every policy's temp alike (l and m over 128 lanes, di over 512:
# 40-55 MB at this size), 5 MB either way between policies.
python3 - "$BIN" > "$T/chk" 2>&1 << 'PY' || fail "remat policies: $(cat "$T/chk")"
import json, re, subprocess, sys, tempfile
sys.path.insert(0, "tools/plan")
import gen, plan
m = plan.load_model("tests/cli/plan/gqa.json")
mem = {}
for pol in ("full", "save_qkv_proj", "save_dot_except_mlp", "minimal", "minimal_offloaded", "off"):
    st = gen.Step(m, {"data": 1, "fsdp": 4, "tensor": 2, "micro": 1, "remat": pol, "kernel": "fusion"})
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
    # the footprint counts the heap; memory_analysis()'s temp adds its fragmentation to it
    f["heap"] = f["hbm_footprint"] - f["hbm_arg"] - f["hbm_out"] + f["hbm_alias"]
    assert 0 < f["heap"] <= f["hbm_temp"] + (1 << 20), (pol, f)
    mem[pol] = f
    # Each saved stack is its own uninitialised buffer (the compiler's AllocateBuffer), in HBM
    # unless offloaded: two of one shape (x and x1) are two buffers, not one broadcast of zeros
    # that both loop-state elements would share.
    assert text.count('custom_call_target="AllocateBuffer"') == len(want | {"x"}), pol
    with tempfile.NamedTemporaryFile("w", suffix=".hlo") as fh:
        fh.write(text); fh.flush()
        r = subprocess.run([sys.argv[1], "compile", fh.name, "--chip", "v5p", "--dump-after", "buffer-assign"],
                           capture_output=True, text=True)
    zs = set(re.findall(r'^\.hbm name="Z\.(\w+)\.\d+"', r.stdout, re.M))
    assert zs == want | {"x"}, (pol, zs)  # (the offloaded ones in the host heap, past the footprint)
print({p: (f["hbm_temp"], f.get("host_temp", 0)) for p, f in mem.items()})
t = {p: f["heap"] for p, f in mem.items()}
# (off keeps the most, but recomputes nothing: the backward's temporaries are fewer than
# minimal's, which recomputes the attention; save_qkv_proj keeps less than
# save_dot_except_mlp but recomputes the output projection and its all-reduce, whose
# temporaries can outweigh the residual stack saved: 2 MB more here with attention as the
# kernel)
assert t["full"] < min(t["save_qkv_proj"], t["save_dot_except_mlp"]) and t["full"] < t["off"], t
assert max(t["save_qkv_proj"], t["save_dot_except_mlp"]) <= t["minimal"], t
assert mem["minimal_offloaded"].get("host_temp", 0) > 0 and t["minimal_offloaded"] < t["minimal"], mem
PY
# Flash attention (the default: key/value blocks with a running max and sum) computes what
# the materialised scores do, for each remat path, with grouped-query heads over a tensor
# axis (the reference backend, small weights so the step is well conditioned), causal (the
# default: the diagonal block masked, the blocks above it skipped) and not; a wrong
# rescaling of the running sum, a wrong mask and a missing one are caught.
if python3 -c "import numpy" 2> /dev/null; then
  python3 - "$BIN" "$T" > "$T/chk" 2>&1 << 'PY' || fail "flash attention values: $(cat "$T/chk")"
import re, sys
import numpy as np
sys.path.insert(0, "tools/plan")
sys.path.insert(0, "tests/cli/lib")
import gen
from plan_values import SMALL as m, rel, run_ref
b, t = sys.argv[1:3]
def run(tag, remat, att, edit=None, causal=True, kernel=False):
    text = gen.Step(m, {"data": 1, "fsdp": 4, "tensor": 2, "micro": 1, "remat": remat, "attention": att, "kv_block": 4,
                        "causal": causal, "kernel": kernel}).module()
    assert ("kOutput" in text) == kernel
    assert ("fa.s3" in text) == (att == "flash")  # four key blocks
    if edit:
        assert edit[0] in text
        text = text.replace(*edit)
    return run_ref(b, t, tag, text)
for remat in (False, True, "minimal"):
    for causal in (True, False):
        d, f = run("d", remat, "dot_product", causal=causal), run("f", remat, "flash", causal=causal)
        assert len(d) == len(f) > 0 and rel(d, f) < 1e-5, (remat, causal, rel(d, f))
        k = run("k", remat, "flash", causal=causal, kernel=True)  # as the Pallas kernels' fusions
        assert rel(d, k) < 1e-5, (remat, causal, rel(d, k))
d = run("d", False, "dot_product")
bad = run("bad", False, "flash", ("fa.c2 = f32[2,2,8] exponential(fa.cd2)", "fa.c2 = f32[2,2,8] negate(fa.cd2)"))
assert rel(d, bad) > 1e-2, rel(d, bad)
# Causal: key block j is computed for the query rows from j * 4 on only (the kernel skips the
# blocks above the diagonal: 10 of 16 here), the diagonal block masked; a mask that lets a
# query see the next key is caught, and so is the unmasked step.
text = gen.Step(m, {"data": 1, "fsdp": 4, "tensor": 2, "micro": 1, "remat": False, "kv_block": 4}).module()
rows = [int(x) for x in re.findall(r"fa\.s\d+ = f32\[2,2,(\d+),4\] dot", text)]
assert rows == [16, 12, 8, 4], rows
bad = run("badm", False, "flash", ("fa.sm1.k = pred[12,4] compare(fa.sm1.r, fa.sm1.c), direction=GE",
                                   "fa.sm1.k = pred[12,4] compare(fa.sm1.r, fa.sm1.c), direction=GT"))
assert rel(d, bad) > 1e-3, rel(d, bad)
assert rel(d, run("un", False, "flash", causal=False)) > 1e-2
PY
fi

# Attention as the library's Pallas kernels (flash_attention's forward, dq and dkv
# pallas_calls instantiated from tools/plan/flash/; the default where a fixture fits: blocks
# of 512, causal) computes what the materialised scores do (reference backend, one chip,
# f32, head dim 64); the residuals l and m swapped in the dq kernel's operands are caught.
if python3 -c "import numpy" 2> /dev/null; then
  python3 - "$BIN" "$T" > "$T/chk" 2>&1 << 'PY' || fail "attention as Pallas kernels: $(cat "$T/chk")"
import sys
sys.path.insert(0, "tools/plan")
sys.path.insert(0, "tests/cli/lib")
import gen
from plan_values import SMALL, rel, run_ref
b, t = sys.argv[1:3]
# Without the norms and rotary embeddings (tests/cli/plan_norms.sh checks them): with them
# the kernels' f32 results differ from the materialised scores' by 2.4e-5 (under 1e-6 without).
m = dict(SMALL, d_model=256, head_dim=64, seq=512, batch_tokens=512, norm="none", position="none")
def run(tag, att, edit=None):
    st = gen.Step(m, {"data": 1, "fsdp": 1, "tensor": 1, "micro": 1, "remat": False, "attention": att})
    text = st.module()
    assert st.pallas == (att == "flash") and text.count('"tpu_custom_call"') == 3 * (att == "flash"), tag
    if edit:
        assert edit[0] in text, edit
        text = text.replace(*edit)
    return run_ref(b, t, tag, text)
d, p = run("pd", "dot_product"), run("pp", "flash")
assert len(d) == len(p) > 0 and rel(d, p) < 1e-6, rel(d, p)
bad = run("pbad", "flash", ("(fq.q, fq.k, fq.v, fq.dq.l, fq.dq.m,", "(fq.q, fq.k, fq.v, fq.dq.m, fq.dq.l,"))
assert rel(d, bad) > 1e-3, rel(d, bad)
PY
fi

# The train state's f32 shards in the layout that pads least, as the XLA TPU compiler lays
# them out (d_model 256 over fsdp 4: the output projection's shard f32[2,256,64] is {1,2,0}):
# the same values as row-major (reference backend, Adam), fewer argument bytes in tpusim's
# accounting, the same bytes when the layouts are off.
if python3 -c "import numpy" 2> /dev/null; then
  python3 - "$BIN" "$T" > "$T/chk" 2>&1 << 'PY' || fail "train state layouts: $(cat "$T/chk")"
import glob, re, subprocess, sys
import numpy as np
sys.path.insert(0, "tools/plan")
import gen
b, t = sys.argv[1:3]
m = {"name": "t", "layers": 2, "d_model": 256, "heads": 2, "head_dim": 128, "mlp": 256, "mlp_kind": "swiglu",
     "vocab": 512, "seq": 16, "batch_tokens": 64, "train_tokens": 1e6, "dtype": "f32", "optimizer": "adam"}
def run(tag, lay):
    text = gen.Step(m, {"data": 1, "fsdp": 4, "tensor": 1, "micro": 1, "remat": True, "kv_block": 8, "layouts": lay}).module()
    assert ("f32[2,256,64]{1,2,0}" in text) == lay, tag
    open(f"{t}/{tag}.hlo", "w").write(text)
    ps = re.findall(r"= (\w+)\[([\d,]*)\][^ ]* parameter\((\d+)\)", text[text.index("ENTRY"):])
    rng, files = np.random.default_rng(7), []
    for dt, dims, i in sorted(ps, key=lambda x: int(x[2])):
        shape = tuple(int(d) for d in dims.split(",")) if dims else ()
        a = rng.integers(0, 16, shape).astype(np.int32) if dt == "s32" else np.abs(0.05 * rng.standard_normal(shape)).astype(np.float32)
        np.save(f"{t}/{tag}_{i}.npy", a)
        files += ["-i", f"{t}/{tag}_{i}.npy"]
    subprocess.run([b, "run", f"{t}/{tag}.hlo", "--backend", "ref", *files, "-o", f"{t}/{tag}", "--quiet"], check=True)
    r = subprocess.run([b, "compile", f"{t}/{tag}.hlo", "--emit", "asm", "--chip", "v5e"], capture_output=True, text=True, check=True)
    arg = int(re.search(r"hbm_arg=(\d+)", r.stdout).group(1))
    return [np.load(f) for f in sorted(glob.glob(f"{t}/{tag}/*.npy"))], arg
(a, arg_l), (c, arg_n) = run("lay", True), run("row", False)
assert len(a) == len(c) > 0 and all(np.array_equal(x, y) for x, y in zip(a, c))
assert arg_l < arg_n, (arg_l, arg_n)
PY
fi

# One microbatch (MaxText's gradient_accumulation_steps 1): the step is the microbatch's
# computation called once, without accumulators (XLA removes a loop that runs once and the
# add of zeros): the same updated parameters as two microbatches accumulated (reference
# backend, SGD), and one set of gradient buffers in HBM, so the published v5e-256 128B
# configuration (MaxText's v5e README, 128b.sh: fsdp 16, tensor 16, per-device batch 1,
# minimal_offloaded) fits v5e's 16 GiB (17.4 GB with the accumulators and the backward
# loop's gradients both held).
if python3 -c "import numpy" 2> /dev/null; then
  python3 - "$BIN" "$T" > "$T/chk" 2>&1 << 'PY' || fail "one microbatch: $(cat "$T/chk")"
import glob, json, re, subprocess, sys
import numpy as np
sys.path.insert(0, "tools/plan")
sys.path.insert(0, "tests/cli/lib")
import gen, plan
from plan_values import counting, saved_inputs
b, t = sys.argv[1:3]
m = {"name": "t", "layers": 2, "d_model": 64, "heads": 4, "kv_heads": 2, "head_dim": 16, "mlp": 128, "mlp_kind": "swiglu",
     "vocab": 256, "seq": 16, "batch_tokens": 256, "train_tokens": 1e6, "dtype": "f32", "optimizer": "sgd", "experts": 0}
def run(tag, micro):
    text = gen.Step(m, {"data": 1, "fsdp": 4, "tensor": 2, "micro": micro, "remat": True, "kv_block": 4}).module()
    entry = text[text.index("ENTRY"):]
    assert ("while(" in entry) == (micro > 1) and ("call(" in entry) == (micro == 1), tag
    open(f"{t}/{tag}.hlo", "w").write(text)
    files, ins = saved_inputs(text, t, tag, seed=3, ints=counting)
    subprocess.run([b, "run", f"{t}/{tag}.hlo", "--backend", "ref", *files, "-o", f"{t}/{tag}", "--quiet"], check=True)
    outs = [np.load(f) for f in sorted(glob.glob(f"{t}/{tag}/*.npy"))]
    return [o - x for o, x in zip(outs, ins[1:])]  # the SGD updates
one, two = run("one", 1), run("two", 2)
assert len(one) == len(two) == 6
for a, c in zip(one, two):
    assert np.max(np.abs(a)) > 0.1 and np.max(np.abs(a - c)) < 1e-5 * np.max(np.abs(a)), (np.max(np.abs(a)), np.max(np.abs(a - c)))
m = plan.load_model("bench/plan_models/maxtext_128b.json")
m["batch_tokens"] = 256 * m["seq"]
text = gen.Step(m, {"data": 1, "fsdp": 16, "tensor": 16, "micro": 1, "remat": "minimal_offloaded"}).module()
open(f"{t}/128b.hlo", "w").write(text)
r = subprocess.run([b, "compile", f"{t}/128b.hlo", "--emit", "asm", "--chip", "v5e"], capture_output=True, text=True)
assert r.returncode == 0, r.stderr
foot = int(re.search(r"hbm_footprint=(\d+)", r.stdout).group(1))
hbm = json.load(open("chips/v5e.json"))["hbm_bytes"]["value"]
assert foot <= hbm, (foot, hbm)
print(foot, hbm)
PY
fi

# MaxText's 2023 model (the v4 rows' published runs): a ReLU MLP (mlp_kind relu: max(up, 0),
# its gradient passed where up > 0) and the attention scores materialised (attention:
# dot_product in the model file). The same parameter updates with remat full as with remat
# off (the recomputed forward's mask is the saved one's), and not those of the tanh MLP.
if python3 -c "import numpy" 2> /dev/null; then
  python3 - "$BIN" "$T" > "$T/chk" 2>&1 << 'PY' || fail "relu MLP: $(cat "$T/chk")"
import glob, json, re, subprocess, sys
import numpy as np
sys.path.insert(0, "tools/plan")
sys.path.insert(0, "tests/cli/lib")
import gen, plan
from plan_values import counting, saved_inputs
b, t = sys.argv[1:3]
m = {"name": "t", "layers": 2, "d_model": 64, "heads": 2, "head_dim": 32, "mlp": 128, "mlp_kind": "relu",
     "attention": "dot_product", "vocab": 256, "seq": 16, "batch_tokens": 128, "train_tokens": 1e6}
open(f"{t}/relu.json", "w").write(json.dumps(m))
m = plan.load_model(f"{t}/relu.json")
assert m["mlp_kind"] == "relu" and m["attention"] == "dot_product", m
D, F, V, L, S, A = 64, 128, 256, 2, 16, 64
assert gen.model_flops_per_token(m) == 6 * (L * (4 * D * A + 2 * D * F) + D * V) + 12 * S * A * L
m.update(dtype="f32", optimizer="sgd", experts=0)
def run(tag, mm, remat):
    text = gen.Step(mm, {"data": 1, "fsdp": 2, "tensor": 1, "micro": 1, "remat": remat}).module()
    entry = text[text.index("ENTRY"):]
    assert ("maximum(" in text and "direction=GT" in text) == (mm["mlp_kind"] == "relu"), tag
    assert "pallas_call" not in text and "custom_call_target=\"tpu_custom_call\"" not in text, tag  # no flash kernel
    open(f"{t}/{tag}.hlo", "w").write(text)
    files, ins = saved_inputs(text, t, tag, seed=5, ints=counting)
    subprocess.run([b, "run", f"{t}/{tag}.hlo", "--backend", "ref", *files, "-o", f"{t}/{tag}", "--quiet"], check=True)
    outs = [np.load(f) for f in sorted(glob.glob(f"{t}/{tag}/*.npy"))]
    return [o - x for o, x in zip(outs, ins[1:])]
full, off, tanh = run("rf", m, "full"), run("ro", m, "off"), run("rt", dict(m, mlp_kind="gelu"), "full")
assert len(full) == len(off) > 0
for a, c in zip(full, off):
    assert np.max(np.abs(a)) > 0 and np.max(np.abs(a - c)) <= 1e-5 * np.max(np.abs(a)), (np.max(np.abs(a)), np.max(np.abs(a - c)))
assert max(np.max(np.abs(a - c)) / np.max(np.abs(a)) for a, c in zip(full, tanh)) > 1e-3
# The activation and its gradient as the step writes them, against numpy: max(up, 0) and
# gact where up > 0 (a mask the wrong way round, or >= 0 on an exact zero, fails).
st = gen.Step(m, {"data": 1, "fsdp": 1, "tensor": 1, "micro": 1, "remat": "full"})
g = gen.Gen()
g.e(f"up = f32[6,{st.f}] parameter(0)")
g.e(f"gact = f32[6,{st.f}] parameter(1)")
st.mlp_act(g, "up", "act", (6,))
st.mlp_act_bwd(g, "gact", "up", "act", "gup", (6,))
g.e(f"ROOT out = (f32[6,{st.f}], f32[6,{st.f}]) tuple(act, gup)")
open(f"{t}/act.hlo", "w").write("HloModule act\n\nENTRY main {\n" + "\n".join(g.lines) + "\n}\n")
rng = np.random.default_rng(1)
up = rng.standard_normal((6, st.f)).astype(np.float32)
up[0, :4] = 0
ga = rng.standard_normal((6, st.f)).astype(np.float32)
np.save(f"{t}/a0.npy", up); np.save(f"{t}/a1.npy", ga)
subprocess.run([b, "run", f"{t}/act.hlo", "--backend", "ref", "-i", f"{t}/a0.npy", "-i", f"{t}/a1.npy", "-o", f"{t}/act", "--quiet"], check=True)
assert np.array_equal(np.load(f"{t}/act/0.npy"), np.maximum(up, 0))
assert np.array_equal(np.load(f"{t}/act/1.npy"), np.where(up > 0, ga, 0))
PY
fi

# A parallel block (block: parallel; MaxText's default decoder until 2024-02, PaLM): attention
# and MLP both read the layer input, y = x + out_proj + MLP. With the output projection zero
# both forms compute the same forward, and every parameter's update is the serial block's but
# wo's (its gradient is ctx^T gy in the parallel block, ctx^T g.x1 in the serial one), for
# each remat path; the tensor-parallel form gathers the residual once a layer, not twice, and
# (where the reduction is a collective, not a windowed ring) reduce-scatters the branches' sum once.
if python3 -c "import numpy" 2> /dev/null; then
  python3 - "$BIN" "$T" > "$T/chk" 2>&1 << 'PY' || fail "parallel block: $(cat "$T/chk")"
import glob, re, subprocess, sys
import numpy as np
sys.path.insert(0, "tools/plan")
sys.path.insert(0, "tests/cli/lib")
import gen
from plan_values import SMALL, inputs
b, t = sys.argv[1:3]
def run(tag, block, remat, F):
    text = gen.Step(dict(SMALL, block=block), {"data": 1, "fsdp": F, "tensor": 1, "micro": 1, "remat": remat,
                                               "kernel": False}).module()
    open(f"{t}/{tag}.hlo", "w").write(text)
    files = inputs(text, t, tag)
    assert re.search(r"P\.wo = \S+ parameter\(2\)", text), "wo is not parameter 2"
    np.save(f"{t}/{tag}_2.npy", np.zeros_like(np.load(f"{t}/{tag}_2.npy")))
    subprocess.run([b, "run", f"{t}/{tag}.hlo", "--backend", "ref", *files, "-o", f"{t}/{tag}", "--quiet"], check=True)
    return [np.load(f) for f in sorted(glob.glob(f"{t}/{tag}/*.npy"))]
for remat, F in (("full", 2), ("minimal", 1), ("off", 2)):
    s, p = run("ser", "serial", remat, F), run("par", "parallel", remat, F)
    assert len(s) == len(p) == 6
    for i in (0, 2, 3, 4, 5):
        d = np.max(np.abs(s[i] - p[i])) / np.max(np.abs(s[i]))
        assert d < 1e-5, (remat, i, d)
    d = np.max(np.abs(s[1] - p[1])) / np.max(np.abs(s[1]))
    assert d > 1e-3, (remat, "wo", d)
def gathers(block):
    text = gen.Step(dict(SMALL, block=block), {"data": 1, "fsdp": 4, "tensor": 2, "micro": 1, "remat": "full",
                                               "kernel": False, "tp_windowed": False}).module()
    fwd = text[text.index("\nfbody"):]
    fwd = fwd[:fwd.index("\n}")]
    return [len(re.findall(op + r"\([^)]*\), channel_id=\d+, replica_groups=\[4,2\]<=\[8\]", fwd))
            for op in ("all-gather", "reduce-scatter")]
# serial: two gathers and two reduce-scatters a layer; parallel: one gather, and the two
# branches' products added before one reduce-scatter (the compiler's reassociation)
assert (gathers("serial"), gathers("parallel")) == ([2, 2], [1, 1]), (gathers("serial"), gathers("parallel"))
PY
fi

[ "$fails" = 0 ] || exit 1
