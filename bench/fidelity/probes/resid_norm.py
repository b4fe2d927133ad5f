"""resid_norm.py [CHIPS] [ONLY] (session 25, resid; needs libtpu, compile-only): does the XLA TPU
compiler end an output projection's kernel with the residual add and the next norm's row sums
(one kOutput fusion returning the sum and f32 row sums), and does tpusim's own compilation
(src/compile/passes/fuse_resid.c, branch resid; not landed: docs/changelog/fidelity.md session 25)
form the same kernel? Cases (shapes off the corpora; x
bf16[B,S,K], w bf16[K,D], the residual r bf16[B,S,D], w2 bf16[D,D]):
  rms      y = x @ w + r; the RMS norm of y (f32 sum of squares over D), then y_n @ w2 + y (the
           next residual reads y: a layer's output projection, its norm and the next block)
  ln       the same with a layer norm (mean and variance over D)
  rms_f32  f32 x, w, r (the add and the sums in f32)
  bias     y = x @ w + bias (a broadcast, no residual) then the RMS norm: the control
  relu     y = x @ w + r, then relu(y) @ w2 + y (no row sum): the control
  colnorm  y = x @ w + r normalized over S (not the minor dimension): the control
One JSON line per case and chip (data/resid_norm.jsonl): compiler (whether a kernel holds a
dot/convolution, an add and a reduce: `fused`; its name and estimated cycles; the program's
total), tpusim (the same question of `tpusim compile --emit hlo`; its kernel's cycles and the
step's, `tpusim run --mode timing`) at the commit that wrote them
(TPUSIM_BEFORE=binary adds its step as step_before)."""
import json, os, re, subprocess, sys, tempfile
os.environ.setdefault("TPU_ACCELERATOR_TYPE", "v5litepod-4")
os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path = [p for p in sys.path if os.path.abspath(p or ".") != HERE]  # libtpu.py here is not libtpu
sys.path.insert(0, os.path.dirname(HERE))
import gen, jax, jax.numpy as jnp
BF, F32 = jnp.bfloat16, jnp.float32
TPUSIM = os.environ.get("TPUSIM", os.path.join(HERE, "..", "..", "..", "build", "tpusim"))
PRESET = {"v4": "v4:core"}


def rms(y):
    yf = y.astype(F32)
    return (yf * jax.lax.rsqrt((yf * yf).mean(-1, keepdims=True) + 1e-6)).astype(y.dtype)


def ln(y, axis=-1):
    yf = y.astype(F32)
    m = yf.mean(axis, keepdims=True)
    v = ((yf - m) ** 2).mean(axis, keepdims=True)
    return ((yf - m) * jax.lax.rsqrt(v + 1e-5)).astype(y.dtype)


def f_rms(x, w, r, w2): y = x @ w + r; return rms(y) @ w2 + y
def f_ln(x, w, r, w2): y = x @ w + r; return ln(y) @ w2 + y
def f_bias(x, w, b, w2): y = x @ w + b; return rms(y) @ w2 + y
def f_relu(x, w, r, w2): y = x @ w + r; return jnp.maximum(y, 0) @ w2 + y
def f_col(x, w, r, w2): y = x @ w + r; return ln(y, 1) @ w2 + y


CASES = []
for B, S, K, D, F in ((2, 384, 640, 640, 640), (4, 192, 896, 896, 896), (1, 1024, 384, 384, 384), (3, 320, 768, 768, 768)):
    tag = f"{B}x{S}x{K}x{D}"
    a = [((B, S, K), BF), ((K, D), BF), ((B, S, D), BF), ((D, F), BF)]
    CASES += [(f"rms_{tag}", f_rms, a), (f"ln_{tag}", f_ln, a), (f"bias_{tag}", f_bias, a[:2] + [((D,), BF)] + a[3:]),
              (f"relu_{tag}", f_relu, a), (f"colnorm_{tag}", f_col, a)]
    if B != 1:
        CASES.append((f"rms_f32_{tag}", f_rms, [(s, F32) for s, _ in a]))


def kernels(txt):
    """name -> set of opcodes (nested fusions included) of each entry fusion."""
    return {n: v[0] for n, v in gen.entry_fusions(txt).items()}


def fused_kernel(ks):
    for n, s in ks.items():
        if ("dot" in s or "convolution" in s) and "reduce" in s and "add" in s:
            return n
    return None


chips = sys.argv[1].split(",") if len(sys.argv) > 1 else ["v5e", "v5p", "v6e", "v4"]
only = sys.argv[2].split(",") if len(sys.argv) > 2 else None
commit = subprocess.run(["git", "-C", HERE, "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
with tempfile.TemporaryDirectory() as d:
    for name, path, chip, txt in gen.compiled_cases(CASES, chips, d, lambda n: not only or any(n.startswith(o) for o in only)):
        cops = {o[0]: o[4] for o in gen.entry_ops(txt)}
        ck = fused_kernel(kernels(txt))
        env = dict(os.environ, TPUSIM_CACHE="off")
        own = subprocess.run([TPUSIM, "compile", path, "--chip", PRESET.get(chip, chip), "--emit", "hlo"],
                             capture_output=True, text=True, env=env).stdout
        tk = fused_kernel(kernels(own))
        rep = os.path.join(d, "r.json")
        before = None
        if os.environ.get("TPUSIM_BEFORE"):  # the step of another binary (the commit before the rule)
            r = subprocess.run([os.environ["TPUSIM_BEFORE"], "run", path, "--mode", "timing", "--chip",
                                PRESET.get(chip, chip), "--report", rep, "--quiet"], capture_output=True, text=True, env=env)
            before = json.load(open(rep))["step"]["cycles"] if r.returncode == 0 else None
        r = subprocess.run([TPUSIM, "run", path, "--mode", "timing", "--chip", PRESET.get(chip, chip), "--report", rep,
                            "--quiet"], capture_output=True, text=True, env=env)
        tops = {o["name"]: o["cycles"] for o in json.load(open(rep))["ops"]} if r.returncode == 0 else {}
        step = json.load(open(rep))["step"]["cycles"] if r.returncode == 0 else None
        print(json.dumps(dict(case=name, chip=chip, compiler=dict(fused=bool(ck), kernel=ck, cycles=cops.get(ck),
                                                                    total=sum(v or 0 for v in cops.values())),
                              tpusim=dict(fused=bool(tk), kernel=tk, cycles=tops.get(tk), step=step, step_before=before),
                              tpusim_commit=commit)), flush=True)
