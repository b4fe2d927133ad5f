#!/usr/bin/env python3
"""loop_blocks.py [OUT.jsonl] [--chips v4,v5p]: libtpu probes of how the XLA TPU compiler's cost
model times an elementwise (kLoop) kernel as its size grows and it is cut into more blocks
(window_config iteration_bounds). Cases (off the families corpus): a chain of three elementwise
steps split by jax.lax.optimization_barrier over f32 / bf16 [R, 1152] with R from 48 to 12288
(216 KiB to 54 MiB f32); the first step reads the parameter from HBM, the middle one reads and
writes what the compiler keeps between kernels (v4's CMEM, S(3); v5p's HBM or VMEM), the last
writes HBM. One JSON line per compiled entry kernel that has an estimate: case, chip, op, its
result's bytes and memory space, iteration_bounds and output_window_bounds, the compiler's
estimated_cycles and tpusim's cycles for that kernel of the compiled program (tpusim run
--chip v4:core / v5p). Needs jax[tpu] (libtpu, compile-only); run one libtpu compile at a
time on the machine (flock /tmp/libtpu_probe.lock). LOOP_BLOCKS_DUMP=DIR keeps each compiled program
as DIR/CASE.CHIP.hlo."""
import json, os, re, subprocess, sys, tempfile
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path = [p for p in sys.path if os.path.abspath(p or ".") != HERE]  # libtpu.py here is not libtpu
sys.path.insert(0, os.path.dirname(HERE))
import gen  # noqa: E402
import jax, jax.numpy as jnp  # noqa: E402

B = jax.lax.optimization_barrier
F32, BF = jnp.float32, jnp.bfloat16
ROWS = [48, 96, 200, 304, 400, 600, 800, 1000, 1200, 1600, 2000, 2400, 3000, 3600, 4800, 6000, 8000, 12288]
COLS = 1152


def chain(x):
    x = B(x * 2 + 1)
    x = B(x * 3 - 1)
    return x * 0.5 + 2


CASES = [(f"lb_{r}x{COLS}_{dt}", chain, [((r, COLS), {"f32": F32, "bf16": BF}[dt])])
         for dt in ("f32", "bf16") for r in ROWS]
CHIP = {"v4": "v4:core", "v5p": "v5p", "v5e": "v5e", "v6e": "v6e"}


def tpusim_ops(tp, text, chip):
    with tempfile.TemporaryDirectory() as d:
        src, rep = os.path.join(d, "p.hlo"), os.path.join(d, "r.json")
        open(src, "w").write(text)
        p = subprocess.run([tp, "run", src, "--mode", "timing", "--chip", chip, "--report", rep, "--quiet", "--no-cache"])
        return {o["name"]: o["cycles"] for o in json.load(open(rep))["ops"]} if p.returncode == 0 else {}


def probe_main(cases, dump_env, keep=None):
    """Compiles `cases` with libtpu for the chips of --chips=... (v4,v5p), times each compiled
    program with tpusim and prints one JSON line per estimated entry kernel (to argv's OUT.jsonl
    or stdout); $dump_env=DIR keeps each compiled program as DIR/CASE.CHIP.hlo."""
    args = [a for a in sys.argv[1:] if not a.startswith("--chips")]
    chips = ["v4", "v5p"]
    for a in sys.argv[1:]:
        if a.startswith("--chips="):
            chips = a.split("=", 1)[1].split(",")
    tp = os.environ.get("TPUSIM", os.path.join(HERE, "..", "..", "..", "build", "tpusim"))
    out = open(args[0], "w") if args else sys.stdout
    extra = {"keep": keep} if keep else {}
    with tempfile.TemporaryDirectory() as d:
        for name, path, chip, text in gen.compiled_cases(cases, chips, d, **extra):
            sim = tpusim_ops(tp, text, CHIP[chip])
            if os.environ.get(dump_env):
                open(os.path.join(os.environ[dump_env], f"{name}.{chip}.hlo"), "w").write(text)
            entry = text[text.rfind("\nENTRY"):]
            for line in entry.splitlines():
                e = re.search(r'"estimated_cycles":"(\d+)"', line)
                m = re.match(r"\s*(?:ROOT )?%(\S+) = (\(.*?\)|\S+) ([\w\-]+)\(", line)
                if not e or not m:
                    continue
                ib = re.search(r'"iteration_bounds":\[([^\]]*)\]', line)
                ow = re.search(r'"output_window_bounds":\[([^\]]*)\]', line)
                sh = m.group(2)
                dims = re.match(r"(\w+)\[([\d,]*)\]", sh)
                n = gen.DT_BYTES.get(dims.group(1), 0)
                for v in filter(None, dims.group(2).split(",")):
                    n *= int(v)
                rec = {"case": name, "chip": chip, "op": m.group(1), "opcode": m.group(3), "shape": sh,
                       "out_bytes": n, "space": "c" if "S(3)" in sh else "v" if "S(1)" in sh else "h",
                       "iteration_bounds": [int(x.strip('"')) for x in ib.group(1).split(",") if x] if ib else None,
                       "output_window_bounds": [int(x.strip('"')) for x in ow.group(1).split(",") if x] if ow else None,
                       "compiler": int(e.group(1)), "tpusim": sim.get(m.group(1))}
                print(json.dumps(rec), file=out, flush=True)


def main():
    probe_main(CASES, "LOOP_BLOCKS_DUMP")


if __name__ == "__main__":
    main()
