#!/bin/sh
# The planner's tensor-parallel layers in MaxText's form (docs/plan.md, "Tensor-parallel
# collectives"): the residual split over the tensor axis along d_model, all-gathered before
# the matmuls that read it, and the reduce-scatter after those that write it (attention's
# output projection and the MLP's down projection, the up and QKV projections' transposes in
# the backward) a windowed einsum as the XLA TPU compiler writes it (bench/plan_tp_probe.py):
# a while loop of T/2 steps, each one partial matmul over two weight blocks and two
# collective-permutes round the tensor ring, and one permute more after it. Its values are the reduce-scatter's; a ring that adds the wrong block is caught.
# Needs python3 (and numpy for the values).
. tests/cli/lib/preamble.sh
command -v python3 > /dev/null 2>&1 || { echo "SKIP: no python3"; exit 77; }

python3 - > "$T/chk" 2>&1 << 'PY' || fail "program form: $(cat "$T/chk")"
import re, sys
sys.path.insert(0, "tools/plan")
import gen
m = {"name": "t", "layers": 2, "d_model": 64, "heads": 4, "kv_heads": 2, "head_dim": 16, "mlp": 128, "mlp_kind": "swiglu",
     "vocab": 256, "seq": 16, "batch_tokens": 128, "train_tokens": 1e6, "dtype": "f32", "optimizer": "sgd", "experts": 0}
def comps(text):
    return dict(re.findall(r"^(\w+) \{\n(.*?)\n\}", text, re.M | re.S))
for T, remat in ((4, "minimal"), (4, "full"), (2, "minimal")):
    text = gen.Step(m, {"data": 1, "fsdp": 8 // T, "tensor": T, "micro": 1, "remat": remat}).module()
    c = comps(text)
    for body in ("fbody", "bbody"):
        b = c[body]
        # no tensor all-reduce of activations in a layer (the norms' row sums, one number a
        # token, are): two windowed reduce-scatters and the residual's all-gathers
        tp = "replica_groups=[%d,%d]<=[8]" % (8 // T, T)
        assert not re.search(r"\[\d+,[\d,]+\] all-reduce\(", b) and not re.search(r"reduce-scatter\(.*" + re.escape(tp), b), (T, remat, body)
        assert re.search(r"= f32\[\d+\] all-reduce\(", b), (T, remat, body)
        loops = re.findall(r"while\(.*condition=(\w+)_cond, body=(\w+)_body.*\"n\":\"(\d+)\"", b)
        assert len(loops) == 2 + (body == "bbody" and remat == "full") * 2, (T, remat, body, loops)
        for _, r, n in loops:
            assert int(n) == T // 2, (body, r, n)
            rb = c[r + "_body"]
            pairs = re.findall(r"collective-permute\(.*source_target_pairs=\{(.*)\}$", rb, re.M)
            assert len(pairs) == 2 and len(re.findall(r" dot\(", rb)) == 1 and " concatenate(" in rb, (r, rb)
            for p in pairs:  # each chip's neighbour on the tensor axis, one way or the other
                pp = {tuple(map(int, x.split(","))) for x in re.findall(r"\{(\d+,\d+)\}", p)}
                assert len(pp) == 8 and all(b // T == a // T and (b - a) % T in (1, T - 1) for a, b in pp), pp
        ag = re.findall(r"all-gather\(\w[\w.]*\), channel_id=\d+, replica_groups=\[\d+,%d\]<=\[8\], dimensions=\{1\}" % T, b)
        assert len(ag) >= 2, (body, ag)
    # "tp_windowed": False keeps the reduce-scatter collectives, no ring
    text = gen.Step(m, {"data": 1, "fsdp": 8 // T, "tensor": T, "micro": 1, "remat": remat, "tp_windowed": False}).module()
    assert "collective-permute" not in text and comps(text)["fbody"].count("reduce-scatter(") == 2
# each ring's pair list is made once for the whole search (a few kB a list on thousands of chips)
ci = gen._tp_pairs.cache_info()
assert ci.hits > ci.misses > 0, ci
PY

if python3 -c "import numpy" 2> /dev/null; then
  python3 - "$BIN" "$T" > "$T/chk" 2>&1 << 'PY' || fail "ring values: $(cat "$T/chk")"
import sys
import numpy as np
sys.path.insert(0, "tools/plan")
sys.path.insert(0, "tests/cli/lib")
import gen
from plan_values import SMALL as m, rel, run_ref
b, t = sys.argv[1:3]
def run(tag, T, remat, tw, edit=None, F=None, block="serial"):
    text = gen.Step(dict(m, block=block), {"data": 1, "fsdp": F or 8 // T, "tensor": T, "micro": 1, "remat": remat, "kernel": False,
                        "tp_windowed": tw}).module()
    if edit:
        assert edit[0] in text, edit
        text = text.replace(*edit)
    return run_ref(b, t, tag, text)
for T, F in ((2, 4), (4, 2), (4, 1)):
    for remat in (False, "minimal"):
        r, w = run("r", T, remat, False, F=F), run("w", T, remat, True, F=F)
        assert len(r) == len(w) > 0 and rel(r, w) < 1e-5, (T, F, remat, rel(r, w))
# A parallel block: the branches' rings added (windowed) against their sum reduce-scattered once.
r, w = run("pr", 4, "minimal", False, F=2, block="parallel"), run("pw", 4, "minimal", True, F=2, block="parallel")
assert len(r) == len(w) > 0 and rel(r, w) < 1e-5, ("parallel", rel(r, w))
# Every chip gets the same inputs: with fsdp 1 the weights' d_model blocks differ from each other.
r = run("r", 4, False, False, F=1)
for edit in (("ia3 = s32[] subtract(ia2, one)", "ia3 = s32[] add(ia2, zero)"),  # the forward sum's block off by one
             ("ib1 = s32[] add(ib0, s0)", "ib1 = s32[] subtract(ib0, s0)")):  # the backward sum's blocks the wrong way
    assert rel(r, run("bad", 4, False, True, edit, F=1)) > 1e-2, edit
PY
fi
[ "$fails" = 0 ] || exit 1
