#!/usr/bin/env python3
"""cmem_rate.py [OUT.jsonl]: libtpu probes of how the XLA TPU compiler's cost model times v4's
elementwise kernels that read or write CMEM (memory space S(3), where v4's compiler keeps the
values between kernels) against the same kernels on HBM. Each case is a chain of elementwise
steps separated by jax.lax.optimization_barrier (one kernel per step): the first reads the
parameter from HBM, the last writes the result to HBM, the ones between read and write values
the compiler places in CMEM. Shapes and ops off the families corpus. Prints one JSON line per
compiled entry kernel: its opcode/root, operand and result bytes by memory space (h = HBM,
c = CMEM), the compiler's estimated_cycles and tpusim's cycles for the same kernel of the
compiled program (tpusim run --chip v4:core). Needs jax[tpu] (libtpu, compile-only); run one
libtpu compile at a time on the machine (flock /tmp/libtpu_probe.lock)."""
import json, os, re, subprocess, sys, tempfile
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path = [p for p in sys.path if os.path.abspath(p or ".") != HERE]  # libtpu.py here is not libtpu
sys.path.insert(0, os.path.dirname(HERE))
import gen  # noqa: E402  (compiled_cases; probes/libtpu.py would shadow the libtpu package)
import jax, jax.numpy as jnp  # noqa: E402

B = jax.lax.optimization_barrier
F32, BF = jnp.float32, jnp.bfloat16


def chain(steps):
    def f(x):
        for s in steps:
            x = B(s(x))
        return x
    return f


STEPS = {
    "mul": [lambda x: x * 2, lambda x: x + 1, lambda x: x * 3, lambda x: x - 1],
    "cvt": [lambda x: x * 2, lambda x: x.astype(BF), lambda x: (x * 3).astype(F32), lambda x: x - 1],
    "two": [lambda x: (x * 2, x + 1), lambda t: (t[0] * t[1], t[1] - 1), lambda t: t[0] + t[1], lambda x: x * 3],
}
SHAPES = [(1000, 1000), (2000, 1536), (3000, 2000), (520, 4000), (6000, 1000), (300, 300, 40)]
CASES = [(f"{k}_{'x'.join(map(str, s))}_{dt}", chain(STEPS[k]), [(s, {'f32': F32, 'bf16': BF}[dt])])
         for k in STEPS for s in SHAPES for dt in ("f32", "bf16") if not (k == "cvt" and dt == "bf16")]


def space_bytes(shape_text):
    out = {}
    for m in re.finditer(r"(\w+)\[([\d,]*)\](\{[^}]*\})?", shape_text):
        n = gen.DT_BYTES.get(m.group(1), 0)
        for v in filter(None, m.group(2).split(",")):
            n *= int(v)
        sp = "c" if "S(3)" in (m.group(3) or "") else "v" if "S(1)" in (m.group(3) or "") else "h"
        out[sp] = out.get(sp, 0) + n
    return out


def tpusim_ops(tp, text, chip):
    """tpusim's cycles per op of the compiled program on chip (v4:core: the compiler's device)."""
    with tempfile.TemporaryDirectory() as d:
        src, rep = os.path.join(d, "p.hlo"), os.path.join(d, "r.json")
        open(src, "w").write(text)
        subprocess.run([tp, "run", src, "--mode", "timing", "--chip", chip, "--report", rep, "--quiet"], check=True)
        return {o["name"]: o["cycles"] for o in json.load(open(rep))["ops"]}


def bare_preset(d):
    """v4's preset without cmem_write_pass (tpusim before the rule), as PATH:core."""
    j = json.load(open(os.path.join(HERE, "..", "..", "..", "chips", "v4.json")))
    j.pop("cmem_write_pass", None)
    path = os.path.join(d, "v4_bare.json")
    json.dump(j, open(path, "w"))
    return path + ":core"


def main():
    tp = os.environ.get("TPUSIM", os.path.join(HERE, "..", "..", "..", "build", "tpusim"))
    out = open(sys.argv[1], "w") if len(sys.argv) > 1 else sys.stdout
    with tempfile.TemporaryDirectory() as d:
        for name, path, chip, text in gen.compiled_cases(CASES, ["v4"], d):
            sim = tpusim_ops(tp, text, "v4:core")
            bare = tpusim_ops(tp, text, bare_preset(d))
            entry = text[text.rfind("\nENTRY"):]
            shapes = {}
            for line in text.splitlines():
                m = re.match(r"\s*(?:ROOT )?%(\S+) = (\(.*?\)|\S+) ", line)
                if m:
                    shapes[m.group(1)] = m.group(2)
            for line in entry.splitlines():
                e = re.search(r'"estimated_cycles":"(\d+)"', line)
                m = re.match(r"\s*(?:ROOT )?%(\S+) = (\(.*?\)|\S+) ([\w\-]+)\((.*?)\)", line)
                if not e or not m:
                    continue
                ins = {}
                for o in re.findall(r"%([\w.\-]+)", m.group(4)):
                    for k, v in space_bytes(shapes.get(o, "")).items():
                        ins[k] = ins.get(k, 0) + v
                rec = {"case": name, "op": m.group(1), "opcode": m.group(3), "in": ins, "out": space_bytes(m.group(2)),
                       "compiler": int(e.group(1)), "tpusim": sim.get(m.group(1)), "tpusim_bare": bare.get(m.group(1))}
                print(json.dumps(rec), file=out, flush=True)


if __name__ == "__main__":
    main()
