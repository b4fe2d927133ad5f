#!/usr/bin/env python3
"""gen_linalg_opt.py: opt.hlo for the conformance cases lowered for TPU (linalg_*).

Their prog.hlo is JAX's TPU lowering (cholesky and triangular-solve HLO ops; on CPU JAX would
call LAPACK). This script rebuilds each program, checks that its TPU lowering is the committed
prog.hlo (metadata aside), compiles that same StableHLO with XLA CPU — whose expanders turn
cholesky and triangular-solve into while loops of plain HLO — and writes XLA's optimized
module as opt.hlo, after checking that the compiled program gives out*.npy within the case's
tolerance. Pinned as gen.py (JAX 0.10.2). Run by hand: python3 tests/conformance/gen_linalg_opt.py"""
import json, os, re, sys
os.environ.setdefault("JAX_PLATFORMS", "cpu")
import jax, jax.numpy as jnp, numpy as np
from jax._src.lib import xla_client as xc

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
CASES = {
    "linalg_cholesky": lambda a: (jnp.linalg.cholesky(a), jnp.linalg.cholesky(a, upper=True)),
    "linalg_solve_right": lambda a, b: jax.lax.linalg.triangular_solve(a, b, left_side=False, lower=True,
                                                                       transpose_a=True),
    "linalg_solve_triangular": lambda a, b: (
        jax.scipy.linalg.solve_triangular(a, b, lower=True), jax.scipy.linalg.solve_triangular(a, b, trans=1),
        jax.scipy.linalg.solve_triangular(a, b, lower=True, unit_diagonal=True),
        jax.scipy.linalg.solve_triangular(a, b, trans="T")),
}


def no_metadata(text):
    return re.sub(r", metadata=\{[^}]*\}", "", text)


def main():
    dev = jax.devices("cpu")[0]
    for name, f in CASES.items():
        d = os.path.join(HERE, "cases", name)
        args = []
        while os.path.exists(os.path.join(d, f"in{len(args)}.npy")):
            args.append(np.load(os.path.join(d, f"in{len(args)}.npy")))
        lo = jax.jit(f).trace(*args).lower(lowering_platforms=("tpu",))
        with open(os.path.join(d, "prog.hlo")) as fh:
            if no_metadata(lo.as_text(dialect="hlo")) != no_metadata(fh.read()):
                raise RuntimeError(f"{name}: the TPU lowering is not the committed prog.hlo")
        exe = dev.client.compile_and_load(str(lo.compiler_ir("stablehlo")), xc.DeviceList((dev,)), xc.CompileOptions())
        opt = exe.hlo_modules()[0].to_string().replace(REPO + os.sep, "")
        if "custom-call" in opt:
            raise RuntimeError(f"{name}: XLA CPU's program has a custom-call")
        with open(os.path.join(d, "meta.json")) as fh:
            tol = json.load(fh)["tol"]
        outs = exe.execute([jax.device_put(a, dev) for a in args])
        for i, o in enumerate(outs):
            want = np.load(os.path.join(d, f"out{i}.npy"))
            if not np.allclose(np.asarray(o), want, rtol=tol["rtol"], atol=tol["atol"]):
                raise RuntimeError(f"{name}: XLA CPU's out{i} is not within the case's tolerance")
        with open(os.path.join(d, "opt.hlo"), "w") as fh:
            fh.write(opt)
        print(f"{name}: opt.hlo, {opt.count(chr(10))} lines, {opt.count(' while(')} while loops")
    return 0


if __name__ == "__main__":
    sys.exit(main())
