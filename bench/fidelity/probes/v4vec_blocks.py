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
import json, os, re, subprocess, sys, tempfile
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
CHIP = {"v4": "v4:core", "v5p": "v5p", "v5e": "v5e", "v6e": "v6e"}


def tpusim_ops(tp, text, chip):
    with tempfile.TemporaryDirectory() as d:
        src, rep = os.path.join(d, "p.hlo"), os.path.join(d, "r.json")
        open(src, "w").write(text)
        p = subprocess.run([tp, "run", src, "--mode", "timing", "--chip", chip, "--report", rep, "--quiet", "--no-cache"])
        return {o["name"]: o["cycles"] for o in json.load(open(rep))["ops"]} if p.returncode == 0 else {}


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--chips")]
    chips = ["v4", "v5p"]
    for a in sys.argv[1:]:
        if a.startswith("--chips="):
            chips = a.split("=", 1)[1].split(",")
    tp = os.environ.get("TPUSIM", os.path.join(HERE, "..", "..", "..", "build", "tpusim"))
    out = open(args[0], "w") if args else sys.stdout
    with tempfile.TemporaryDirectory() as d:
        for name, path, chip, text in gen.compiled_cases(CASES, chips, d, keep=lambda n: not ONLY or ONLY in n):
            sim = tpusim_ops(tp, text, CHIP[chip])
            if os.environ.get("V4VEC_DUMP"):
                open(os.path.join(os.environ["V4VEC_DUMP"], f"{name}.{chip}.hlo"), "w").write(text)
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


if __name__ == "__main__":
    main()
