"""conv_norm_dot.py [CHIPS] [ONLY] (session 26, models; needs libtpu, compile-only): where a
dot reads a layer norm of a convolution's activations (convnext's block: a 7x7 depthwise
convolution, its layer norm over the features, the projection), does the XLA TPU compiler
fuse the norm's normalisation into the dot's kernel (as it does for a transformer's norm
before its projections), or keep it a kernel of its own that the dot reads relaid? And does
tpusim's own compilation decide the same (fuse_merge.c prologue_pair, relayout.c
tpu__conv_layout_value)? Shapes off the corpora: x bf16[B,H,W,C], a depthwise 7x7 filter
bf16[7,7,1,C] (or a plain 3x3 one bf16[3,3,C,C]), w bf16[C,F].
  dw_B_HxWxC    depthwise 7x7 conv + bias, layer norm over C, then @ w: the case
  conv_B_HxWxC  a plain 3x3 convolution instead
  par_B_HxWxC   the norm of the parameter x itself (no convolution), then @ w: the control
  seq_B_SxC     x bf16[B,S,C], the norm then @ w (a transformer's): the control
One JSON line per case and chip (data/conv_norm_dot.jsonl): whether a kernel of its own
holds the normalisation (subtract and multiply, no reduce, no dot or convolution) in the
compiler's program (`separate`, with its cycles and layout) and in tpusim's."""
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
DN = ("NHWC", "HWIO", "NHWC")


def ln(y):
    yf = y.astype(F32)
    m = yf.mean(-1, keepdims=True)
    v = ((yf - m) ** 2).mean(-1, keepdims=True)
    return ((yf - m) * jax.lax.rsqrt(v + 1e-6)).astype(y.dtype)


def f_dw(x, k, b, w):
    c = x.shape[-1]
    y = jax.lax.conv_general_dilated(x, k, (1, 1), "SAME", dimension_numbers=DN, feature_group_count=c) + b
    return ln(y) @ w


def f_conv(x, k, b, w):
    y = jax.lax.conv_general_dilated(x, k, (1, 1), "SAME", dimension_numbers=DN) + b
    return ln(y) @ w


def f_par(x, w): return ln(x) @ w


CASES = []
for B, H, C in ((2, 20, 160), (4, 20, 160), (4, 36, 256), (8, 20, 160), (1, 20, 160), (4, 24, 160), (2, 40, 256)):
    F = 4 * C
    tag = f"{B}_{H}x{H}x{C}"
    CASES.append((f"dw_{tag}", f_dw, [((B, H, H, C), BF), ((7, 7, 1, C), BF), ((C,), BF), ((C, F), BF)]))
for B, H, C in ((4, 20, 160), (2, 36, 256)):
    tag = f"{B}_{H}x{H}x{C}"
    CASES.append((f"conv_{tag}", f_conv, [((B, H, H, C), BF), ((3, 3, C, C), BF), ((C,), BF), ((C, 4 * C), BF)]))
    CASES.append((f"par_{tag}", f_par, [((B, H, H, C), BF), ((C, 4 * C), BF)]))
CASES.append(("seq_4_400x160", f_par, [((4, 400, 160), BF), ((160, 640), BF)]))


def kernels(txt):
    """entry fusion name -> (opcodes of it and its nested fusions, result shape text); fusions
    with a tuple result left out."""
    return {n: v for n, v in gen.entry_fusions(txt).items() if not v[1].startswith("(")}


def norm_kernel(ks):
    for n, (s, shape) in ks.items():
        if "subtract" in s and "multiply" in s and not s & {"reduce", "dot", "convolution"}:
            return n, shape
    return None, None


chips = sys.argv[1].split(",") if len(sys.argv) > 1 else ["v5e", "v6e", "v5p", "v4"]
only = sys.argv[2].split(",") if len(sys.argv) > 2 else None
commit = subprocess.run(["git", "-C", HERE, "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
with tempfile.TemporaryDirectory() as d:
    for name, path, chip, txt in gen.compiled_cases(CASES, chips, d, lambda n: not only or any(n.startswith(o) for o in only)):
        cops = {o[0]: o[4] for o in gen.entry_ops(txt)}
        ck, cshape = norm_kernel(kernels(txt))
        env = dict(os.environ, TPUSIM_CACHE="off")
        own = subprocess.run([TPUSIM, "compile", path, "--chip", PRESET.get(chip, chip), "--emit", "hlo"],
                             capture_output=True, text=True, env=env).stdout
        tk, _ = norm_kernel(kernels(own))
        print(json.dumps(dict(case=name, chip=chip, compiler=dict(separate=bool(ck), kernel=ck, layout=cshape,
                                                                    cycles=cops.get(ck)),
                              tpusim=dict(separate=bool(tk), kernel=tk), tpusim_commit=commit)), flush=True)
