#!/usr/bin/env python3
"""unit_reduce.py [CHIPS]: libtpu probes of a reduce over dimensions of one element (XLA's
algebraic simplifier HandleReduce makes it a reshape; tpusim's simplify.c/reduce_bcast.c
tpu__reduce_of_one makes it op(broadcast(init), reshape(x))) and of a dynamic-slice whose start
index is wrapped (JAX's lt/add/select on an s32[] position; fuse_ops.c tpu__fuse_slice_index).
Each case (--only=SUBSTR,...: those whose JSON holds one) is compiled per generation (default
v5e,v4); one JSON line per (case, chip) with the
compiler's entry ops (name, opcode, estimated_cycles), whether any reduce is left anywhere in
its program, its cycles, tpusim's kernels and cycles. Appends to data/unit_reduce.jsonl."""
import json, os, re, sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from libtpu import each_compiled, entry_ops

OPS = {"add": ("add", "0"), "max": ("maximum", "-inf"), "and": ("and", "true"), "mul": ("multiply", "1")}


def reduce_case(dt, shape, dims, red, reader):
    """x: dt[shape] reduced over dims (all of size 1) with `red`, then `reader`: 'mul' multiplies
    the result by a second parameter, 'sel' selects with it (pred), 'none' returns it."""
    op, init = OPS[red]
    out = [s for i, s in enumerate(shape) if i not in dims]
    sd = lambda s: ",".join(map(str, s))
    t = f"{dt}[{sd(out)}]"
    body = (f"HloModule u\n\nr {{\n  a = {dt}[] parameter(0)\n  b = {dt}[] parameter(1)\n  ROOT c = {dt}[] {op}(a, b)\n}}\n\n"
            f"ENTRY main {{\n  x = {dt}[{sd(shape)}] parameter(0)\n  y = {t} parameter(1)\n  i = {dt}[] constant({init})\n"
            f"  s = {t} reduce(x, i), dimensions={{{sd(dims)}}}, to_apply=r\n")
    if reader == "mul":
        body += f"  ROOT m = {t} multiply(s, y)\n}}\n"
    elif reader == "sel":
        body += f"  z = f32[{sd(out)}] parameter(2)\n  w = f32[{sd(out)}] parameter(3)\n  ROOT m = f32[{sd(out)}] select(s, z, w)\n}}\n"
    else:
        body += f"  ROOT m = {t} add(s, y)\n}}\n"
    return body


def slice_case(dt, n, rows, lanes):
    """x: dt[1,n,rows,lanes] sliced at a wrapped position p (p < 0: p + n), plus u, reshaped."""
    return (f"HloModule d\n\nENTRY main {{\n  c = {dt}[1,{n},{rows},{lanes}] parameter(0)\n  u = {dt}[1,1,{rows},{lanes}] parameter(1)\n"
            f"  p = s32[] parameter(2)\n  z = s32[] constant(0)\n  k = s32[] constant({n})\n"
            f"  lt = pred[] compare(p, z), direction=LT\n  a = s32[] add(p, k)\n  s = s32[] select(lt, a, p)\n"
            f"  d = {dt}[1,1,{rows},{lanes}] dynamic-slice(c, z, s, z, z), dynamic_slice_sizes={{1,1,{rows},{lanes}}}\n"
            f"  e = {dt}[1,1,{rows},{lanes}] add(d, u)\n  ROOT r = {dt}[1,{rows},{lanes}] reshape(e)\n}}\n")


CASES = [
    ("reduce", ("f32", (1, 1, 1, 192), (0, 1, 2), "add", "mul")),
    ("reduce", ("bf16", (1, 1, 1, 768), (0, 1, 2), "add", "mul")),
    ("reduce", ("f32", (1000, 1), (1,), "add", "mul")),
    ("reduce", ("f32", (8, 1, 1, 32, 1), (1, 2, 4), "add", "mul")),
    ("reduce", ("f32", (512, 1), (1,), "max", "mul")),
    ("reduce", ("f32", (4, 2, 4, 256, 1), (4,), "mul", "none")),
    ("reduce", ("pred", (128, 2, 1), (2,), "and", "sel")),
    ("reduce", ("bf16", (512, 1), (1,), "max", "mul")),
    ("reduce", ("bf16", (1000, 1), (1,), "add", "mul")),
    ("reduce", ("f16", (1, 1, 1, 256), (0, 1, 2), "add", "mul")),
    ("slice", ("bf16", 512, 8, 128)),
    ("slice", ("f32", 300, 16, 256)),
]


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--only=")]
    only = [a[7:] for a in sys.argv[1:] if a.startswith("--only=")]
    chips = args[0].split(",") if args else ["v5e", "v4"]
    cases = [c for c in CASES if not only or any(o in json.dumps(c) for o in only[0].split(","))]
    out = open(os.path.join(HERE, "data", "unit_reduce.jsonl"), "a")
    build = lambda kind, args: reduce_case(*args) if kind == "reduce" else slice_case(*args)
    for case, chip, text, own, summ, comp in each_compiled(cases, build, chips):
        ops = entry_ops(comp)
        rec = dict(case=case, chip=chip, compiler_cycles=summ.get("entry_estimated_cycles"),
                   compiler_ops=[[o[0], o[2], o[3]] for o in ops if o[3] is not None],
                   compiler_reduces=len(re.findall(r" reduce\(", comp)),
                   tpusim_ops=[[n, k, c] for n, k, c in own], tpusim_cycles=sum(c for _, _, c in own))
        print(json.dumps(rec), flush=True)
        out.write(json.dumps(rec) + "\n")


if __name__ == "__main__":
    main()
