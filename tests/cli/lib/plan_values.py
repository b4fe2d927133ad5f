"""Values of planner-generated steps on tpusim's reference backend, shared by the CLI tests
that compare two forms of one step (tests/cli/plan_step.sh, tests/cli/plan_tp.sh)."""
import glob
import re
import subprocess

import numpy as np

# A small dense model: two layers, grouped-query attention, SwiGLU, f32, SGD.
SMALL = {"name": "t", "layers": 2, "d_model": 64, "heads": 4, "kv_heads": 2, "head_dim": 16, "mlp": 128,
         "mlp_kind": "swiglu", "vocab": 256, "seq": 16, "batch_tokens": 128, "train_tokens": 1e6, "dtype": "f32",
         "optimizer": "sgd", "experts": 0}


def saved_inputs(text, t, tag, seed=5, ints=None):
    """Seeded inputs for the entry parameters of `text`, saved under t: tpusim's -i arguments and
    the arrays. s32 parameters (token ids) are ints(shape) where given, else drawn in [0, 16)."""
    ps = re.findall(r"= (\w+)\[([\d,]*)\][^ ]* parameter\((\d+)\)", text[text.index("ENTRY"):])
    rng, files, arrays = np.random.default_rng(seed), [], []
    for dt, dims, i in sorted(ps, key=lambda x: int(x[2])):
        shape = tuple(int(d) for d in dims.split(",")) if dims else ()
        if dt == "s32":
            a = ints(shape) if ints else rng.integers(0, 16, shape).astype(np.int32)
        else:
            a = (0.1 * rng.standard_normal(shape)).astype(np.float32)
        np.save(f"{t}/{tag}_{i}.npy", a)
        files += ["-i", f"{t}/{tag}_{i}.npy"]
        arrays.append(a)
    return files, arrays


def inputs(text, t, tag):
    """Seeded inputs for the entry parameters of `text`, saved under t; tpusim's -i arguments."""
    return saved_inputs(text, t, tag)[0]


def counting(shape):
    """Token ids 0, 1, ... 199, 0, ... in the order of the elements."""
    return (np.arange(int(np.prod(shape))) % 200).astype(np.int32).reshape(shape)


def run_ref(b, t, tag, text):
    """Runs program `text` on tpusim `b`'s reference backend; its results, in order."""
    open(f"{t}/{tag}.hlo", "w").write(text)
    subprocess.run([b, "run", f"{t}/{tag}.hlo", "--backend", "ref", *inputs(text, t, tag), "-o", f"{t}/{tag}", "--quiet"],
                   check=True)
    return [np.load(f) for f in sorted(glob.glob(f"{t}/{tag}/*.npy"))]


def rel(x, y):
    """The largest relative difference of two lists of results."""
    return max(float(np.max(np.abs(a - c)) / np.max(np.abs(a))) for a, c in zip(x, y))
