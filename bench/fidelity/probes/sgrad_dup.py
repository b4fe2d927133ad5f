"""sgrad_dup.py [CHIPS] [ONLY] (session 30, mem; needs libtpu, compile-only): when does the XLA TPU
compiler recompute a softmax gradient dS = P * (dP - rowsum) inside each of the two matmuls that
read it (dQ = dS K, dK = dSᵀ Q: the elementwise work a nested kLoop fusion of each kOutput
convolution fusion, dS never in memory), and when does it store dS once from a kLoop kernel of
its own? Cases off the corpora (B, H, S, D below; P and dP [B,H,S,S], rowsum [B,H,S]):
  bf16         P, dP bf16, dS bf16 (mt32b / llama no-remat steps, bert/gpt2 train: recomputed)
  f32          P, dP, dS f32
  f32p         P f32, dP bf16, dS computed in f32 and rounded to bf16 (the calibration
               corpus's attn_bwd_*_causal: stored)
  f32pd        P, dP f32, dS rounded to bf16
  bf16x3       dS = P * (dP - rowsum) + E, E a third bf16 [B,H,S,S] array (operand bytes 3x the
               result's without a narrowing)
  bf16_f32out  P, dP bf16, dS f32 (a widening)
  bf16_3mm     as bf16, dS read by a third matmul (dS W, W [B,H,S,D])
  bf16_f32out_3mm, bf16_f32out_4mm, f32_3mm: three or four matmuls read dS
  bf16_s8mask  dS = P * (dP - rowsum) * M, M an int8 [B,H,S,S] array (operand bytes 2.5x)
One JSON line per case and chip (data/sgrad_dup.jsonl): compiler (stored: an entry kernel without
a matmul computes dS; recomputed: how many matmul kernels compute the subtract; compiler_total:
the entry ops' estimated cycles), tpusim (the same of `tpusim compile --emit hlo`; step: its
`tpusim run --mode timing` cycles, step_before those of TPUSIM_BEFORE=binary)."""
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


def mk(cdt, odt, extra=False, third=0):
    def f(p, dp, r, q, k, *rest):
        ds = (p.astype(cdt) * (dp.astype(cdt) - r.astype(cdt)[..., None]))
        if extra:
            ds = ds + rest[0].astype(cdt) if extra == 1 else ds * rest[0].astype(cdt)
        ds = ds.astype(odt)
        dq = jnp.einsum("bhqk,bhkd->bhqd", ds, k.astype(odt))
        dk = jnp.einsum("bhqk,bhqd->bhkd", ds, q.astype(odt))
        out = [dq, dk]
        for w in rest[len(rest) - third:]:
            out.append(jnp.einsum("bhqk,bhkd->bhqd", ds, w.astype(odt)))
        return out
    return f


CASES = []
for B, H, S, D in ((2, 6, 768, 96), (3, 4, 1280, 64), (1, 8, 2560, 128)):
    tag = f"b{B}h{H}s{S}d{D}"
    big, row, qk = (B, H, S, S), (B, H, S), (B, H, S, D)
    for name, pt, dpt, cdt, odt, ex, th in (("bf16", BF, BF, BF, BF, 0, 0), ("f32", F32, F32, F32, F32, 0, 0),
                                            ("f32p", F32, BF, F32, BF, 0, 0), ("f32pd", F32, F32, F32, BF, 0, 0),
                                            ("bf16x3", BF, BF, BF, BF, 1, 0), ("bf16_f32out", BF, BF, F32, F32, 0, 0),
                                            ("bf16_3mm", BF, BF, BF, BF, 0, 1),
                                            ("bf16_f32out_3mm", BF, BF, F32, F32, 0, 1),
                                            ("bf16_f32out_4mm", BF, BF, F32, F32, 0, 2),
                                            ("bf16_s8mask", BF, BF, BF, BF, 2, 0),
                                            ("f32_3mm", F32, F32, F32, F32, 0, 1)):
        a = [(big, pt), (big, dpt), (row, F32 if pt == F32 else BF), (qk, odt), (qk, odt)]
        if ex:
            a.append((big, BF if ex == 1 else jnp.int8))
        a += [(qk, odt)] * th
        CASES.append((f"{name}_{tag}", mk(cdt, odt, ex, th), a))


def classify(txt, big):
    """('stored' | 'recomputed' | 'other', matmul kernels computing the subtract)."""
    dims = ",".join(map(str, big))
    stored, mm = False, 0
    for n, (ops, shape) in gen.entry_fusions(txt).items():
        has_mm = "convolution" in ops or "dot" in ops
        if "subtract" in ops and has_mm:
            mm += 1
        elif "subtract" in ops and dims in shape:
            stored = True
    return ("stored" if stored else "recomputed" if mm >= 2 else "other"), mm


chips = sys.argv[1].split(",") if len(sys.argv) > 1 else ["v5e", "v5p"]
only = sys.argv[2].split(",") if len(sys.argv) > 2 else None
commit = subprocess.run(["git", "-C", HERE, "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
shapes = {n: a[0][0] for n, _, a in CASES}
with tempfile.TemporaryDirectory() as d:
    for name, path, chip, txt in gen.compiled_cases(CASES, chips, d, lambda n: not only or any(n.startswith(o) for o in only)):
        env = dict(os.environ, TPUSIM_CACHE="off")
        own = subprocess.run([TPUSIM, "compile", path, "--chip", PRESET.get(chip, chip), "--emit", "hlo"],
                             capture_output=True, text=True, env=env).stdout
        c, cm = classify(txt, shapes[name])
        t, tm = classify(own, shapes[name])
        total = sum(o[4] for o in gen.entry_ops(txt))
        steps = {}
        for key, binary in (("step", TPUSIM), ("step_before", os.environ.get("TPUSIM_BEFORE"))):
            if not binary:
                continue
            rep = os.path.join(d, "r.json")
            r = subprocess.run([binary, "run", path, "--mode", "timing", "--chip", PRESET.get(chip, chip), "--report", rep,
                                "--quiet"], capture_output=True, text=True, env=env)
            steps[key] = json.load(open(rep))["step"]["cycles"] if r.returncode == 0 else None
        print(json.dumps(dict(case=name, chip=chip, compiler=c, compiler_mm=cm, compiler_total=total, tpusim=t, tpusim_mm=tm,
                              **steps, tpusim_commit=commit)), flush=True)
