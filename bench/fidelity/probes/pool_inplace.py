#!/usr/bin/env python3
"""pool_inplace.py GEN CONFIGS.json: libtpu probes of the XLA TPU compiler's pooling window
kernel reading its input in place in VMEM (chip/timing.c OP_IN_PLACE, docs/timing.md "Pooling
windows"). CONFIGS is a JSON list of [kind, shape, dtype, window, strides] (kind max or avg, a
plain reduce-window of a parameter, VALID); each is compiled with
/work/shared/tools/tpu_compile.py for one device of GEN and timed by tpusim; prints one JSON
line per pool: the compiler's entry cycles ("total"), its window fusion's estimated_cycles and
window_config where it makes one ("win", "wc"), whether it prefetched the input into VMEM
("xpf"), and tpusim's step cycles ("sim"). data/pool_inplace.json holds the session-17 run
(v5e, v6e, v4, v5p: max pools of f32[16,20,20,256] 3x3 at strides 1 and 2, whose results are
5.3 and 1.3 MB from the same 6.5 MB input, and others). A window of 5 at stride 1 is another
emitter (no window_config), left out."""
import hashlib, json, os, re, sys, tempfile

import libtpu
from libtpu import TOPO, tpusim_step_cycles


def pool_hlo(k, shape, dt, wins, strides):
    out = [(shape[d] - wins[d]) // strides[d] + 1 for d in range(len(shape))]
    init, op = ("-inf", "maximum") if k == "max" else ("0", "add")
    sh, osh = ",".join(map(str, shape)), ",".join(map(str, out))
    w, s = "x".join(map(str, wins)), "x".join(map(str, strides))
    return (f"HloModule probe, entry_computation_layout={{({dt}[{sh}])->{dt}[{osh}]}}\n\n"
            f"r {{\n  a = {dt}[] parameter(0)\n  b = {dt}[] parameter(1)\n  ROOT c = {dt}[] {op}(a, b)\n}}\n\n"
            f"ENTRY main {{\n  x = {dt}[{sh}] parameter(0)\n  i = {dt}[] constant({init})\n"
            f"  ROOT y = {dt}[{osh}] reduce-window(x, i), window={{size={w} stride={s}}}, to_apply=r\n}}\n")


def main():
    gen, cfgs = sys.argv[1], json.load(open(sys.argv[2]))
    with tempfile.TemporaryDirectory() as d:
        for c in cfgs:
            text = pool_hlo(*c)
            summ, t = libtpu.compile_retry(text, TOPO[gen], d)
            if not t:
                print(json.dumps(dict(gen=gen, cfg=c, err="compile")), flush=True)
                continue
            ent = t[t.rfind("\nENTRY"):]
            rec = dict(gen=gen, cfg=c, total=summ["entry_estimated_cycles"],
                       xpf="cross_program_prefetch_index" in t, sim=tpusim_step_cycles(text, gen, d))
            m = re.search(r'= (\S+) fusion\([^)]*\), kind=kOutput[^\n]*"window_config":(\{[^}]*\})', ent)
            if m:
                rec["win"] = int(re.search(r'"estimated_cycles":"(\d+)"', m.group(2)).group(1))
                rec["wc"] = m.group(2)
                rec["out"] = m.group(1)
            print(json.dumps(rec), flush=True)


if __name__ == "__main__":
    main()
