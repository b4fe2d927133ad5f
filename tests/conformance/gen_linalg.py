#!/usr/bin/env python3
"""gen_linalg.py: the conformance cases of jnp.linalg / jax.scipy.linalg lowered for TPU.

On CPU JAX lowers cholesky and triangular solves to LAPACK custom calls; lowered for TPU
(`jit(f).trace(*args).lower(lowering_platforms=("tpu",))`) they are the HLO ops `cholesky`
and `triangular-solve`, which is what prog.hlo holds. The expected outputs are JAX's on CPU
(LAPACK). opt.hlo is XLA CPU's optimized program for the same TPU lowering (its expanders
turn the two ops into while loops of plain HLO), checked to give out*.npy within the case's
tolerance. Inputs, meta.json and the file layout are gen.py's (README.md). Pinned as gen.py
(JAX 0.10.2). Run by hand:

    python3 tests/conformance/gen_linalg.py [--only NAME,...]
"""
import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gen  # noqa: E402  (pins JAX's settings; Rand, hlo_signature, to_npy, ...)
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from jax import lax  # noqa: E402
from jax._src.lib import xla_client as xc  # noqa: E402

CASES = []


def case(name, desc, tol=gen.TOL_MM):
    def deco(builder):
        CASES.append((name, desc, tol, builder))
        return builder
    return deco


def triangle(r, *shape):
    """Well-conditioned triangular factors: unit-ish diagonal, small off-diagonal terms
    (both triangles filled: a solve must read only the one it names)."""
    n = shape[-1]
    a = r.normal(*shape, scale=0.3)
    a += np.eye(n, dtype=np.float32) * (1.5 + r.uniform(*shape[:-1], lo=0.0, hi=1.0)[..., None])
    return a.astype(np.float32)


def spd(r, *shape):
    """Symmetric positive definite: x x^T / n + I."""
    x = r.normal(*shape)
    n = shape[-1]
    return (np.einsum("...ij,...kj->...ik", x, x) / n + np.eye(n, dtype=np.float32)).astype(np.float32)


@case("linalg_solve_all", "lax.linalg.triangular_solve on a batch of 2: left and right side, "
      "lower and upper, no transpose / transpose / adjoint (JAX lowers a real adjoint to TRANSPOSE), "
      "and two unit-diagonal solves; both triangles of a are filled")
def _(r):
    a, bl, br = triangle(r, 2, 6, 6), r.normal(2, 6, 4), r.normal(2, 4, 6)

    def f(a, bl, br):
        outs = []
        for left in (True, False):
            for lower in (True, False):
                for t in range(3):
                    outs.append(lax.linalg.triangular_solve(a, bl if left else br, left_side=left, lower=lower,
                                                            transpose_a=t > 0, conjugate_a=t == 2))
        outs.append(lax.linalg.triangular_solve(a, bl, left_side=True, lower=False, transpose_a=True,
                                                unit_diagonal=True))
        outs.append(lax.linalg.triangular_solve(a, br, left_side=False, lower=True, unit_diagonal=True))
        return tuple(outs)
    return f, (a, bl, br)


@case("linalg_solve_blocked", "jax.scipy.linalg.solve_triangular of a 150x150 triangle with 20 "
      "right-hand sides, lower and upper (XLA's expansion in opt.hlo works in 128-wide blocks)")
def _(r):
    a, b = triangle(r, 150, 150), r.normal(150, 20)
    return (lambda a, b: (jax.scipy.linalg.solve_triangular(a, b, lower=True),
                          jax.scipy.linalg.solve_triangular(a, b, lower=False, trans=1))), (a, b)


@case("linalg_cholesky_blocked", "jnp.linalg.cholesky of 2 SPD 160x160 matrices, lower and "
      "upper (more than one 128-wide panel in XLA's expansion)", (2e-4, 2e-5))
def _(r):
    return (lambda a: (jnp.linalg.cholesky(a), jnp.linalg.cholesky(a, upper=True))), (spd(r, 2, 160, 160),)


@case("linalg_cholesky_not_pd", "jnp.linalg.cholesky of 3 matrices, the second not positive "
      "definite: NaN for that matrix only")
def _(r):
    a = spd(r, 3, 4, 4)
    a[1, 2, 2] = -1.0
    return (lambda a: jnp.linalg.cholesky(a)), (a,)


@case("linalg_cho_solve", "jax.scipy.linalg.cho_factor + cho_solve (cholesky, then two "
      "triangular solves) of an SPD 12x12 system with 3 right-hand sides")
def _(r):
    def f(a, b):
        c = jax.scipy.linalg.cho_factor(a, lower=True)
        return jax.scipy.linalg.cho_solve(c, b)
    return f, (spd(r, 12, 12), r.normal(12, 3))


def generate(name, desc, tol, builder):
    fn, args = builder(gen.Rand(name))
    fn.__name__ = name
    lo = jax.jit(fn).trace(*args).lower(lowering_platforms=("tpu",))
    prog = lo.as_text(dialect="hlo")
    if "custom-call" in prog:
        raise RuntimeError(f"{name}: the TPU lowering has a custom-call")
    psig, rsig = gen.hlo_signature(prog)
    ins = jax.tree_util.tree_leaves(args)
    outs = jax.tree_util.tree_leaves(jax.jit(fn)(*args))  # JAX on CPU: LAPACK
    gen.check_leaves("in", ins, psig)
    gen.check_leaves("out", outs, rsig)
    dev = jax.devices("cpu")[0]
    exe = dev.client.compile_and_load(str(lo.compiler_ir("stablehlo")), xc.DeviceList((dev,)), xc.CompileOptions())
    opt = gen.normalize_paths(exe.hlo_modules()[0].to_string())
    if "custom-call" in opt:
        raise RuntimeError(f"{name}: XLA CPU's program has a custom-call")
    got = exe.execute([jax.device_put(a, dev) for a in ins])
    for i, (g, w) in enumerate(zip(got, outs)):
        if not np.allclose(np.asarray(g), np.asarray(w), rtol=tol[0], atol=tol[1], equal_nan=True):
            raise RuntimeError(f"{name}: XLA CPU's out{i} is not within the case's tolerance")
    gen.write_case(name, desc, tol, prog, opt, ins, outs, psig, rsig, lowered_for="tpu")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", help="comma-separated case names")
    a = ap.parse_args()
    only = set(a.only.split(",")) if a.only else None
    for c in CASES:
        if only is None or c[0] in only:
            generate(*c)
            print("wrote", c[0])
    return 0


if __name__ == "__main__":
    sys.exit(main())
