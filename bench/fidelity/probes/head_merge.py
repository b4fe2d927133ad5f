#!/usr/bin/env python3
"""head_merge.py > data/head_merge.jsonl (session 32, ownfast): attention's head merge before
the output projection, o[b,h,.,.] -> [b,q,h*d] @ wo, with the P.V product's result written
either way round: dot(v, p) -> [b,h,d,q] (q in the lanes, as swin_fwd_*'s einsum lowers) or
dot(p, v) -> [b,h,q,d] (d in the lanes), compiled by libtpu off the corpus. For each case and
generation: the compiler's entry kernels (name, opcode, estimated cycles) and whether a
`copy` kernel lies between the P.V kernel and the projection's (the compiled swin's `copy.101`,
bf16[64,49,6,32]{1,3,2,0} into {3,2,1,0}), and tpusim's kernels.

Question: when does the merge of heads become a copy of its own? Answer (data): where the
projection's operand would have to read its contracting dimension (h*d) out of a layout whose
lanes hold one of its free dimensions (q), i.e. the P.V result has q in the lanes; not where d is.
Run: python3 head_merge.py [GENS]  (default v5e)."""
import json, os, sys, tempfile
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import libtpu  # noqa: E402
import jax, jax.numpy as jnp  # noqa: E402
from jax import lax  # noqa: E402

# (b, q, h, d, orientation, form): sizes off the families corpus. orientation 'vp': dot(v, p),
# q in the result's lanes; 'pv': dot(p, v), d in the lanes. form '3d': [b,q,h*d] @ wo (the
# operand has two free dimensions); '2d': [b*q, h*d] @ wo (one).
CASES = [
    (8, 64, 4, 64, "vp", "3d"), (8, 64, 4, 64, "pv", "3d"),
    (16, 36, 8, 32, "vp", "3d"), (16, 36, 8, 32, "pv", "3d"),
    (4, 100, 6, 64, "vp", "3d"), (4, 100, 6, 64, "pv", "3d"),
    (32, 16, 4, 32, "vp", "3d"), (8, 144, 12, 32, "vp", "3d"),
    (8, 64, 4, 64, "vp", "2d"), (16, 36, 8, 32, "vp", "2d"),
]


def hlo(b, q, h, d, orient, form):
    def f(p, v, wo):
        if orient == "vp":  # v [b,k,h,d] x p [b,h,q,k] -> [b,h,d,q]
            o = lax.dot_general(v, p, (((1,), (3,)), ((0, 2), (0, 1))))
            o = jnp.transpose(o, (0, 3, 1, 2))
        else:  # p [b,h,q,k] x v [b,k,h,d] -> [b,h,q,d]
            o = lax.dot_general(p, v, (((3,), (1,)), ((0, 1), (0, 2))))
            o = jnp.transpose(o, (0, 2, 1, 3))
        o = o.reshape(b, q, h * d) if form == "3d" else o.reshape(b * q, h * d)
        return o @ wo
    bf = jnp.bfloat16
    args = [jax.ShapeDtypeStruct((b, h, q, q), bf), jax.ShapeDtypeStruct((b, q, h, d), bf),
            jax.ShapeDtypeStruct((h * d, h * d), bf)]
    return jax.jit(f).lower(*args).as_text(dialect="hlo")


def main():
    gens = libtpu.chips_arg(sys.argv) if len(sys.argv) > 1 else ["v5e"]
    out = open(os.path.join(HERE, "data", "head_merge.jsonl"), "a")
    for case, chip, text, own, summ, comp in libtpu.each_compiled(CASES, hlo, gens):
        ops = libtpu.entry_ops(comp)
        kern = [o for o in ops if o[3] is not None]
        copies = [o for o in kern if o[2] == "copy" and o[1].count(",") >= 2]
        libtpu.emit(dict(case=case, chip=chip, compiler=[[o[0], o[1], o[3]] for o in kern],
                         compiler_copy=[[o[0], o[1], o[3]] for o in copies],
                         tpusim=[list(o) for o in own]), out)


if __name__ == "__main__":
    main()
