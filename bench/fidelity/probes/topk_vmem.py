#!/usr/bin/env python3
"""topk_vmem.py > data/topk_vmem.jsonl (session 32, ownfast): MoE-style routing off the
corpus: lax.top_k over router logits [T, E], a one-hot dispatch mask built from the top-k
indices (bf16 [T, E, C], a broadcast-compare-reduce over the k choices), and the dispatch
einsum 'tec,td->ecd'. For each case and generation: the compiler's entry kernels (name,
shape with memory space, estimated cycles) and tpusim's kernels with and without its rule
(TPUSIM_NO_TOPK_VMEM=1).

Question: where does the compiler keep a top-k's results, and what does the mask kernel
reading them cost? Answer (data): in VMEM (S(1)) on the one-core chips (v5e, v6e), so the mask
kernel reads nothing from HBM and its whole per-element stream pass is charged (a resident
kernel, docs/timing.md); tpusim kept the results in HBM and spread that pass over their
small reads. Run: python3 topk_vmem.py [GENS] (default v5e,v6e)."""
import json, os, subprocess, sys, tempfile
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import libtpu  # noqa: E402
import jax, jax.numpy as jnp  # noqa: E402
from jax import lax  # noqa: E402

# (T tokens, E experts, k, C capacity, D model): off the families corpus's moe_top2_* shapes
CASES = [(2048, 8, 2, 256, 256), (1024, 16, 2, 128, 512), (512, 4, 1, 384, 256),
         (4096, 8, 2, 128, 128), (1024, 32, 4, 64, 256), (1536, 8, 2, 192, 384)]


def hlo(T, E, k, C, D):
    def f(logits, x):
        _, idx = lax.top_k(logits, k)  # s32[T, k]
        pos = (idx * 7 + jnp.arange(T, dtype=jnp.int32)[:, None]) % C
        oe = (idx[:, :, None, None] == jnp.arange(E, dtype=jnp.int32)[None, None, :, None])
        oc = (pos[:, :, None, None] == jnp.arange(C, dtype=jnp.int32)[None, None, None, :])
        mask = jnp.sum((oe & oc).astype(jnp.bfloat16), axis=1)  # bf16[T, E, C]
        return jnp.einsum("tec,td->ecd", mask, x)
    args = [jax.ShapeDtypeStruct((T, E), jnp.float32), jax.ShapeDtypeStruct((T, D), jnp.bfloat16)]
    return jax.jit(f).lower(*args).as_text(dialect="hlo")


def own(text, gen, off):
    env = dict(os.environ, TPUSIM_CACHE="0")
    if off:
        env["TPUSIM_NO_TOPK_VMEM"] = "1"
    with tempfile.TemporaryDirectory() as d:
        src, rep = os.path.join(d, "p.hlo"), os.path.join(d, "r.json")
        open(src, "w").write(text)
        subprocess.run([libtpu.TPUSIM, "run", src, "--mode", "timing", "--chip", libtpu.PRESET.get(gen, gen),
                        "--report", rep, "--quiet"], check=True, env=env)
        r = json.load(open(rep))
    return r["step"]["cycles"], [(o["name"], o["kind"], o["cycles"]) for o in r["ops"]]


def main():
    gens = libtpu.chips_arg(sys.argv) if len(sys.argv) > 1 else ["v5e", "v6e"]
    out = open(os.path.join(HERE, "data", "topk_vmem.jsonl"), "a")
    for case, chip, text, _, summ, comp in libtpu.each_compiled(CASES, hlo, gens):
        kern = [[o[0], o[1], o[3]] for o in libtpu.entry_ops(comp) if o[3] is not None]
        on, on_ops = own(text, chip, 0)
        off, off_ops = own(text, chip, 1)
        libtpu.emit(dict(case=case, chip=chip, compiler_cycles=sum(o[2] for o in kern), compiler=kern,
                         tpusim_cycles=on, tpusim_no_rule_cycles=off, tpusim=on_ops), out)


if __name__ == "__main__":
    main()
