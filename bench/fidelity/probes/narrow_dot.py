#!/usr/bin/env python3
"""narrow_dot.py [GENS] [OUT.jsonl]: libtpu probes of plain dots x @ w ([M,K] x [K,N], both
parameters) whose result is narrower than the MXU (N < 128) and their neighbours (N >= 128):
which the XLA TPU compiler writes transposed (result layout {0,1}, the M rows in the lanes,
emitter EmitInputBatchInLanes), on each generation, over M, K, N and the operand type. Prints
one JSON line per case and chip: the result's layout, the kernel's emitter, the compiler's
estimated_cycles, and tpusim's cycles for its own compilation (own) and for the compiled program
(tpusim; tpusim_off: with TPUSIM_NO_NARROW_LHS_STATIONARY=1, the rule off). Session 31 (narrow): the probe behind the narrow-result orientation rule in
docs/timing-mxu.md. Needs libtpu (compile-only)."""
import json, os, re, sys
from libtpu import TPUSIM, chips_arg, each_compiled, emit, entry_ops, tpusim_ops

ACC = {"bf16": "bf16", "f32": "f32", "s8": "s32"}
CASES = [("bf16", m, k, n) for m in (1000, 128, 64, 8) for k in (33, 1024) for n in (7, 33, 64, 100, 127, 128, 200)]
CASES += [("s8", m, k, n) for m in (100, 1000) for k in (33, 2048) for n in (7, 64, 127, 128)]
CASES += [("f32", m, k, n) for m in (100, 1000) for k in (33, 2048) for n in (7, 64, 127, 128)]
CASES += [("bf16", m, 512, n) for m in (16, 32, 96, 256, 3000) for n in (16, 96)]
# the checks run first (session 31: shapes not used to find the rule)
CASES = [("s8", 1000, 33, 7), ("s8", 1000, 33, 64), ("s8", 2048, 256, 33), ("s8", 1000, 2048, 7),
         ("f32", 1000, 33, 33), ("bf16", 2048, 256, 33)] + CASES


def hlo(dt, m, k, n):
    acc = ACC[dt]
    return (f"HloModule d\nENTRY %main (x: {dt}[{m},{k}], w: {dt}[{k},{n}]) -> {acc}[{m},{n}] {{\n"
            f"  %x = {dt}[{m},{k}] parameter(0)\n  %w = {dt}[{k},{n}] parameter(1)\n"
            f"  ROOT %d = {acc}[{m},{n}] dot(%x, %w), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}\n}}\n")


def main():
    chips = chips_arg(sys.argv)
    out = open(sys.argv[2], "a") if len(sys.argv) > 2 else None
    for case, chip, text, own, summ, comp in each_compiled(CASES, hlo, chips):
        ops = entry_ops(comp)
        sim = {}
        for key, env in (("tpusim", None), ("tpusim_off", "1")):  # the rule on and off (A/B)
            if env:
                os.environ["TPUSIM_NO_NARROW_LHS_STATIONARY"] = env
            try:
                sim[key] = sum(c for _, _, c in tpusim_ops(TPUSIM, comp, chip))
            except Exception:  # noqa: BLE001
                sim[key] = None
            os.environ.pop("TPUSIM_NO_NARROW_LHS_STATIONARY", None)
        ent = comp[comp.rfind("\nENTRY"):]
        root = next((l for l in ent.splitlines() if l.strip().startswith("ROOT")), "")
        lay = re.search(r"= \w+\[[\d,]*\]\{([\d,]*)", root)
        em = re.search(r'"emitter":"(\w+)"', comp)
        ecl = re.search(r"entry_computation_layout=\{\((.*?)\)->", comp)
        rec = dict(case=case, chip=chip, layout=lay.group(1) if lay else None, emitter=em.group(1) if em else None,
                   params=ecl.group(1) if ecl else None, kernels=[o[2] for o in ops if o[3] is not None],
                   compiler=sum(o[3] for o in ops if o[3] is not None), own=sum(c for _, _, c in own), **sim)
        emit(rec, out)


if __name__ == "__main__":
    main()
