#!/usr/bin/env python3
"""pipeline_bundles.py: what a Pallas grid step costs in the TPU's own code. Compiles small
pallas_calls with libtpu (compile-only, no TPU: jax[tpu]) and reads the final VLIW bundles
of the kernel's program (`--xla_jf_dump_to`): the pipeline Pallas emits is one software-
pipelined loop of steps + 2 iterations (the prologue's fetch and the epilogue's write-back
folded in as stages), whose body issues the next step's DMAs (each with a bounds check),
waits on this step's, runs the kernel body and starts the write-back. Its length in bundles
(from the loop-body label to the back branch, plus the branch's 4 delay slots) is the step's
scalar overhead when nothing stalls: one bundle a cycle.

    python3 bench/pallas/pipeline_bundles.py [--chips v5e,v5p,v6e] [--steps 16]
    python3 bench/pallas/pipeline_bundles.py --matmul [--chips v5e]   # the guide's matmul steps

Kernels: an 8 x 128 f32 block per window (so the body is one vector op or none), 1, 2 or 4
inputs summed into one output, on a 1-D grid and on a (steps, 4) grid."""
import glob
import os
import re
import subprocess
import sys
import tempfile
import time

TOPO = {"v5e": "v5e:2x2", "v5p": "v5p:2x2x1", "v6e": "v6e:2x2", "v4": "v4:2x2x1"}


def compile_one(topo, kind, nin, n):
    os.environ.setdefault("TPU_ACCELERATOR_TYPE", "v5litepod-4")
    os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")
    import jax
    import jax.numpy as jnp
    from jax.experimental import pallas as pl
    from jax.experimental import topologies
    from jax.sharding import SingleDeviceSharding
    dev = topologies.get_topology_desc(platform="tpu", topology_name=topo).devices[0]

    def kern(*refs):
        acc = refs[0][...]
        for r in refs[1:-1]:
            acc = acc + r[...]
        refs[-1][...] = acc
    if kind == "1d":
        grid, spec, shape = (n,), pl.BlockSpec((8, 128), lambda i: (i, 0)), (8 * n, 128)
    else:
        grid, spec, shape = (n, 4), pl.BlockSpec((8, 128), lambda i, j: (i, j)), (8 * n, 512)
    f = lambda *xs: pl.pallas_call(kern, grid=grid, in_specs=[spec] * nin, out_specs=spec,  # noqa: E731
                                   out_shape=jax.ShapeDtypeStruct(shape, jnp.float32))(*xs)
    s = jax.ShapeDtypeStruct(shape, jnp.float32, sharding=SingleDeviceSharding(dev))
    jax.jit(f).lower(*([s] * nin)).compile()


MM_BLOCKS = [(128, 128, 128), (256, 256, 256), (512, 512, 512), (128, 512, 128), (128, 1024, 128),
             (1024, 128, 128), (128, 128, 1024)]


def compile_mm(topo, bm, bk, bn):
    """The Pallas guide's matmul (judge.guide_matmul) at 1024^3 with blocks bm x bk x bn."""
    os.environ.setdefault("TPU_ACCELERATOR_TYPE", "v5litepod-4")
    os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")
    import jax
    import jax.numpy as jnp
    from jax.experimental import topologies
    from jax.sharding import SingleDeviceSharding
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import judge
    dev = topologies.get_topology_desc(platform="tpu", topology_name=topo).devices[0]
    s = jax.ShapeDtypeStruct((1024, 1024), jnp.bfloat16, sharding=SingleDeviceSharding(dev))
    jax.jit(judge.guide_matmul("plain", bm, bk, bn)).lower(s, s).compile()


def mxu_ops(dump):
    """Counts of vmatpush / vmatmul / vpop on MXU 0 in the kernel's final bundles."""
    f = [x for x in glob.glob(os.path.join(dump, "*-final_bundles.txt")) if "_lambda_" in x or "pallas" in x or "-f.1-" in x]
    text = open(f[0]).read()
    return tuple(len(re.findall(r"\b%s\.[\w.]*mxu0\b" % op, text)) for op in ("vmatpush", "vmatmul", "vpop"))


def dump_of(args, parse):
    for _ in range(5):  # libtpu may be busy in another process (its lock): try again
        with tempfile.TemporaryDirectory(prefix="pallas_bundles_") as d:
            env = dict(os.environ, LIBTPU_INIT_ARGS="--xla_jf_dump_to=" + d)
            subprocess.run([sys.executable, os.path.abspath(__file__)] + args, env=env, capture_output=True, text=True)
            try:
                return parse(d)
            except (IndexError, StopIteration, AttributeError):
                time.sleep(2)
    return None


def loop_of(dump):
    """(loop body bundles incl. the back branch's delay slots, the exit test's bound, total bundles)."""
    f = glob.glob(os.path.join(dump, "*-final_bundles.txt"))
    f = [x for x in f if "_lambda_" in x or "pallas" in x or "-f.1-" in x]
    text = open(f[0]).read().split("\n")
    rows = []
    for ln in text:
        m = re.match(r"\s+(0x[0-9a-f]+|\d+)\s", ln)
        if m:
            rows.append((int(m.group(1), 0), ln))
    lb = next(a for a, ln in rows if " LB:" in ln)
    ex = [(a, ln) for a, ln in rows if "loop exit test" in ln]
    bound = int(re.search(r"scmp\.ge\.s32\.totalorder %\w+, (\d+) /\* loop exit test", ex[-1][1]).group(1))
    back = next(a for a, ln in rows if a >= ex[-1][0] and "sbr.rel" in ln)
    return back - lb + 1 + 4, bound, rows[-1][0] + 1


def main(argv):
    if argv[:1] == ["one"]:
        compile_one(argv[1], argv[2], int(argv[3]), int(argv[4]))
        return 0
    if argv[:1] == ["mm"]:
        compile_mm(argv[1], int(argv[2]), int(argv[3]), int(argv[4]))
        return 0
    chips = (argv[argv.index("--chips") + 1] if "--chips" in argv else "v5e,v5p,v6e").split(",")
    if "--matmul" in argv:
        print("%-4s %-16s %12s %10s %22s" % ("chip", "blocks", "loop bundles", "trips", "mxu0 push/matmul/pop"))
        for chip in chips:
            for b in MM_BLOCKS:
                got = dump_of(["mm", TOPO[chip]] + [str(x) for x in b], lambda d: (loop_of(d), mxu_ops(d)))
                if not got:
                    print("%-4s %-16s  no bundle dump from libtpu" % (chip, "x".join(map(str, b))))
                    continue
                (body, bound, _), ops = got
                print("%-4s %-16s %12d %10d %22s" % (chip, "x".join(map(str, b)), body, bound, "/".join(map(str, ops))))
        return 0
    n = int(argv[argv.index("--steps") + 1]) if "--steps" in argv else 16
    print("%-4s %-5s %6s %14s %12s %14s" % ("chip", "grid", "inputs", "loop bundles", "loop trips", "total bundles"))
    for chip in chips:
        for kind in ("1d", "2d"):
            for nin in (1, 2, 4):
                got = None
                for _ in range(5):  # libtpu may be busy in another process (its lock): try again
                    with tempfile.TemporaryDirectory(prefix="pallas_bundles_") as d:
                        env = dict(os.environ, LIBTPU_INIT_ARGS="--xla_jf_dump_to=" + d)
                        subprocess.run([sys.executable, os.path.abspath(__file__), "one", TOPO[chip], kind, str(nin), str(n)],
                                       env=env, capture_output=True, text=True)
                        try:
                            got = loop_of(d)
                            break
                        except (IndexError, StopIteration, AttributeError):
                            time.sleep(2)
                if not got:
                    print("%-4s %-5s %6d  no bundle dump from libtpu" % (chip, kind, nin))
                    continue
                body, bound, total = got
                steps = n if kind == "1d" else 4 * n
                print("%-4s %-5s %6d %14d %12s %14d" % (chip, kind, nin, body, "%d (%d steps)" % (bound, steps), total))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
