#!/usr/bin/env python3
"""v4vec_blocks.py [OUT.jsonl] [--chips=v4,v5p]: libtpu probes of how the XLA TPU compiler's cost
model times an elementwise (kLoop) kernel whose vector work outlasts its transfers as it is cut
into blocks (window_config iteration_bounds). Cases (off the families corpus): one fusion from a
parameter in HBM to a result in HBM of f32 / bf16 [R, 896], R 224 / 1120 / 10080 (1, 3 and 8
blocks on v4), with 1-32 ops per element, either a tanh / multiply / exp / add cycle (mix) or
multiply / add only (arith). One JSON line per compiled entry kernel with an estimate (same
fields as loop_blocks.py). Needs jax[tpu] (libtpu, compile-only); run one libtpu compile at a
time on the machine (flock /tmp/libtpu_probe.lock). V4VEC_DUMP=DIR keeps each compiled
program as DIR/CASE.CHIP.hlo; V4VEC_ONLY=SUBSTR runs only the cases whose name holds it."""
import importlib.util, os, sys
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path = [p for p in sys.path if os.path.abspath(p or ".") != HERE]  # libtpu.py here is not libtpu
sys.path.insert(0, os.path.dirname(HERE))
import gen  # noqa: E402
import jax, jax.numpy as jnp  # noqa: E402

F32, BF = jnp.float32, jnp.bfloat16
COLS = 896
ROWS = [224, 1120, 10080]  # about 0.2 M, 1 M, 9 M elements: 1, 3 and 8 compiler blocks on v4
NOPS = [1, 2, 4, 8, 16, 32]
MIX = [jnp.tanh, lambda x: x * 1.01, jnp.exp, lambda x: x + 0.3]   # transcendental mix
ARITH = [lambda x: x * 1.01, lambda x: x + 0.3]                    # multiply/add only


def chain(n, ops):
    def f(x):
        for i in range(n):
            x = ops[i % len(ops)](x)
        return x
    return f


CASES = ([(f"vb_{r}x{COLS}_{dt}_mix{n}", chain(n, MIX), [((r, COLS), {"f32": F32, "bf16": BF}[dt])])
          for dt in ("f32", "bf16") for r in ROWS for n in NOPS] +
         [(f"vb_{r}x{COLS}_f32_arith{n}", chain(n, ARITH), [((r, COLS), F32)]) for r in ROWS for n in (4, 16, 32)])
ONLY = os.environ.get("V4VEC_ONLY")


def main():
    # the compile-and-record loop of loop_blocks.py (this folder is off sys.path: load it by file)
    spec = importlib.util.spec_from_file_location("loop_blocks", os.path.join(HERE, "loop_blocks.py"))
    lb = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(lb)
    lb.probe_main(CASES, "V4VEC_DUMP", keep=lambda n: not ONLY or ONLY in n)


if __name__ == "__main__":
    main()
