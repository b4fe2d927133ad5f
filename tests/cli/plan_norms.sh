#!/bin/sh
# The planner's non-matmul layer work (tools/plan/norms.py; docs/plan.md, "Norms and rotary
# embeddings"): RMSNorm of the residual and its gradient (with the row sums all-reduced over a
# tensor axis), rotary embeddings and their transpose, the per-head norm of MaxText's 2023
# decoder and its gradient, each on tpusim's reference backend against numpy (the gradients
# against finite differences, the rotary transpose by <rope x, y> = <x, rope^T y>); a wrong
# sign in a gradient is caught. Then the generated step: the model's "norm", "position" and
# "qk_norm" write those ops (and leave them out when "none"), and they cost time. Needs python3
# and numpy.
. tests/cli/lib/preamble.sh
command -v python3 > /dev/null 2>&1 || { echo "SKIP: no python3"; exit 77; }
python3 -c "import numpy" 2> /dev/null || { echo "SKIP: no numpy"; exit 77; }

python3 - "$BIN" "$T" > "$T/chk" 2>&1 << 'PY' || fail "norm values: $(cat "$T/chk")"
import glob, subprocess, sys
import numpy as np
sys.path.insert(0, "tools/plan")
import gen, norms
b, t = sys.argv[1:3]
Tm, D, B, S, H, hd = 6, 16, 2, 3, 2, 8

class St:  # what norms.py reads of a Step: one chip of a tensor axis T = 1
    cd, T, Tm, D = "f32", 1, Tm, D
    def ar(self, *a, **k):
        raise AssertionError("no collective with T = 1")

def program(edit=None):
    g = gen.Gen()
    q4 = (B, S, H, hd)
    for i, (nm, sh) in enumerate((("x", (Tm, D)), ("gn", (Tm, D)), ("q", q4), ("gq", q4))):
        g.e(f"{nm} = f32[{','.join(map(str, sh))}] parameter({i})")
    st = St()
    r = norms.residual_norm(st, g, "xn", "x")
    norms.residual_norm_bwd(st, g, "gx", "gn", "x", r)
    norms.rope(st, g, "qr", "q", q4)
    norms.rope(st, g, "gr", "gq", q4, grad=True)
    rh = norms.head_norm(st, g, "qh", "q", q4)
    norms.head_norm_bwd(st, g, "gh", "gq", "q", rh, q4)
    g.e("ROOT out = (f32[6,16], f32[6,16], f32[2,3,2,8], f32[2,3,2,8], f32[2,3,2,8], f32[2,3,2,8]) "
        "tuple(xn, gx, qr, gr, qh, gh)")
    text = ("HloModule norms\n\nadd_f32 {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n"
            "  ROOT r = f32[] add(a, b)\n}\n\nENTRY e {\n" + "\n".join(g.lines) + "\n}\n")
    if edit:
        assert edit[0] in text, edit
        text = text.replace(*edit)
    return text

rng = np.random.default_rng(3)
x, gn = rng.standard_normal((Tm, D)), rng.standard_normal((Tm, D))
q, gq = rng.standard_normal((B, S, H, hd)), rng.standard_normal((B, S, H, hd))

def run(tag, text):
    open(f"{t}/{tag}.hlo", "w").write(text)
    args = []
    for i, a in enumerate((x, gn, q, gq)):
        np.save(f"{t}/{tag}_{i}.npy", a.astype(np.float32))
        args += ["-i", f"{t}/{tag}_{i}.npy"]
    subprocess.run([b, "run", f"{t}/{tag}.hlo", "--backend", "ref", *args, "-o", f"{t}/{tag}", "--quiet"], check=True)
    return [np.load(f).astype(np.float64) for f in sorted(glob.glob(f"{t}/{tag}/*.npy"))]

def rms(v, axis):
    return v / np.sqrt(np.mean(v * v, axis=axis, keepdims=True) + 1e-6)

def rope(v):
    half = hd // 2
    fr = 10000.0 ** (-np.arange(half) * 2.0 / hd)
    ang = np.arange(S)[:, None] * fr[None, :]
    ang = np.concatenate([ang, ang], -1)[None, :, None, :]
    return v * np.cos(ang) + np.concatenate([-v[..., half:], v[..., :half]], -1) * np.sin(ang)

def vjp(f, v, g, eps=1e-6):  # the gradient of <f(v), g> by central differences
    out = np.zeros_like(v)
    for i in np.ndindex(v.shape):
        d = np.zeros_like(v); d[i] = eps
        out[i] = np.sum((f(v + d) - f(v - d)) * g) / (2 * eps)
    return out

def close(a, c, what, tol=1e-4):
    err = np.max(np.abs(a - c)) / np.max(np.abs(c))
    assert err < tol, (what, err)

xn, gx, qr, gr, qh, gh = run("ok", program())
close(xn, rms(x, 1), "residual norm")
close(gx, vjp(lambda v: rms(v, 1), x, gn), "residual norm gradient")
close(qr, rope(q), "rope")
close(np.sum(qr * gq), np.sum(q * gr), "rope transpose")  # <rope q, gq> = <q, rope^T gq>
close(qh, rms(q, 3), "head norm")
close(gh, vjp(lambda v: rms(v, 3), q, gq), "head norm gradient")
# A wrong sign in a gradient is caught.
bad = run("bad", program(("gx.d = f32[6,16] subtract(gx.a, gx.b)", "gx.d = f32[6,16] add(gx.a, gx.b)")))
err = np.max(np.abs(bad[1] - gx)) / np.max(np.abs(gx))
assert err > 1e-2, err
PY

# The generated step: the model's fields write the ops (a tensor axis of 2: the residual norm's
# row sums all-reduced over it), "none" leaves them out, and they take time on the chip.
python3 - "$BIN" "$T" > "$T/chk" 2>&1 << 'PY' || fail "norms in the step: $(cat "$T/chk")"
import re, subprocess, sys
sys.path.insert(0, "tools/plan")
import gen, plan
b, t = sys.argv[1:3]
m = plan.load_model("tests/cli/plan/gqa.json")
def step(**kw):
    text = gen.Step(dict(m, **kw), {"data": 1, "fsdp": 4, "tensor": 2, "micro": 1, "remat": "full"}).module()
    open(f"{t}/s.hlo", "w").write(text)
    r = subprocess.run([b, "run", f"{t}/s.hlo", "--mode", "timing", "--chip", "v5p", "--quiet", "--report", f"{t}/s.json"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    import json
    return text, json.load(open(f"{t}/s.json"))["step"]["seconds"]
none, t0 = step(norm="none", position="none")
full, t1 = step(qk_norm="qkv")
assert "rsqrt" not in none and "cosine" not in none
assert len(re.findall(r"rsqrt\(", full)) >= 4 and "cosine(" in full  # residual and head norms; rotary
assert re.search(r"xn\.\d+\.ss = f32\[\d+\] all-reduce", full), "row sums not all-reduced over tensor"
assert t1 > t0 * 1.005, (t0, t1)
PY
[ "$fails" = 0 ] || exit 1
