#!/usr/bin/env python3
"""copy_out.py SEED N GENS [TPUSIM...]: libtpu probes of a copy out of VMEM into HBM (needs
libtpu). Draws N random 1x1 convolutions with relu, x [B,H,W,Ci] NHWC -> [B,H,W,Co] NHWC (bf16 or
f32), compiles each for one device of each generation (GENS, e.g. v5e,v5p,v6e) and, for every
top-level `copy` of the compiled entry whose operand is in VMEM (S(1)) and whose result is in
HBM (the convolution's result laid out {3,0,2,1} in VMEM, relaid out into the entry's
{3,2,1,0}), prints one JSON line: the case, the generation, the copy's shapes, its
estimated_cycles, its result's bytes and elements, and each tpusim binary's cycles for that
copy when it times the COMPILED program (as compare.py --compiled). Rule it checks
(src/chip/timing.c, a copy out of VMEM): the compiler charges the copy its HBM write and the
per-element stream pass of a 16-bit result plus its start, nothing for reading its operand in
VMEM. Finding (session 19, seed 11, 10 draws, data/copy_out.jsonl, tpusim columns: main 9da5c9b1
then the rule): v5e 1.29-1.85x -> 0.90-1.05x (bf16[4,64,64,512] 117,384 cycles: 154,993 ->
116,689); v6e 0.90-1.18x -> 0.75-1.12x, its two f32 results over 32 MiB under (the compiler
charges them ~1.33x their write); v5p writes these results to HBM (no such copy). Example:
    python3 bench/fidelity/probes/copy_out.py 7 8 v5e,v5p,v6e build/tpusim
(COPY_OUT_SAVE=DIR keeps each compiled program there.)
"""
import importlib.util, json, os, random, re, subprocess, sys, tempfile
os.environ.setdefault("TPU_ACCELERATOR_TYPE", "v5litepod-4")
os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")
HERE = os.path.dirname(os.path.abspath(__file__))
# this folder's libtpu.py would shadow the libtpu package jax loads: leave it off the path
sys.path = [p for p in sys.path if os.path.abspath(p or ".") != HERE]
_spec = importlib.util.spec_from_file_location("scan_window", os.path.join(HERE, "scan_window.py"))
_sw = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_sw)
compile_text = _sw.compile_text  # loads libtpu once


def conv_hlo(dt, b, h, w, ci, co):
    x = f"{dt}[{b},{h},{w},{ci}]"
    y = f"{dt}[{b},{h},{w},{co}]"
    return (f"HloModule p, entry_computation_layout={{({x}{{3,2,1,0}}, {dt}[1,1,{ci},{co}]{{3,2,1,0}})->{y}{{3,2,1,0}}}}\n\n"
            f"ENTRY e {{\n  x = {x} parameter(0)\n  k = {dt}[1,1,{ci},{co}] parameter(1)\n"
            f"  c = {y} convolution(x, k), window={{size=1x1}}, dim_labels=b01f_01io->b01f\n"
            f"  z = {dt}[] constant(0)\n  zb = {y} broadcast(z), dimensions={{}}\n"
            f"  ROOT r = {y} maximum(c, zb)\n}}\n")


def entry_ops(text):
    entry = text[text.rfind("\nENTRY"):]
    shapes, out = {}, []
    for line in entry.split("\n"):
        m = re.search(r"%(\S+) = (\(.*?\)|\S+) ([\w\-]+)\(([^)]*)\)", line)
        if not m:
            continue
        shapes[m.group(1)] = m.group(2)
        cyc = re.search(r'"estimated_cycles":"(\d+)"', line)
        out.append((m.group(1), m.group(2), m.group(3), m.group(4), int(cyc.group(1)) if cyc else None))
    return out, shapes


def sim_ops(tpusim, text, gen):
    with tempfile.TemporaryDirectory() as d:
        src, rep = os.path.join(d, "p.hlo"), os.path.join(d, "r.json")
        open(src, "w").write(text)
        p = subprocess.run([tpusim, "run", src, "--mode", "timing", "--chip", gen, "--report", rep, "--quiet"],
                           capture_output=True, text=True, env=dict(os.environ, TPUSIM_CACHE="off"))
        if p.returncode:
            return {}
        return {o["name"]: o["cycles"] for o in json.load(open(rep))["ops"]}


def main():
    seed, n, gens, tpusims = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3].split(","), sys.argv[4:]
    rng = random.Random(seed)
    for _ in range(n):
        dt = rng.choice(["bf16", "f32"])
        b = rng.choice([4, 8, 16])  # (a batch of 2 takes space to batch: elided constants)
        h = rng.choice([14, 28, 40, 56, 64, 96])
        ci, co = rng.choice([64, 128, 256]), rng.choice([128, 256, 384, 512])
        case = [dt, b, h, h, ci, co]
        for g in gens:
            try:
                text = compile_text(conv_hlo(*case), g)
            except Exception as e:  # noqa: BLE001 (libtpu's errors vary)
                print(json.dumps({"case": case, "gen": g, "error": str(e)[:200]}), flush=True)
                continue
            if os.environ.get("COPY_OUT_SAVE"):  # keep the compiled program to time again
                open(os.path.join(os.environ["COPY_OUT_SAVE"], "%s_%s.hlo" % ("_".join(map(str, case)), g)), "w").write(text)
            ops, shapes = entry_ops(text)
            sims = [sim_ops(t, text, g) for t in tpusims]
            for name, shape, opc, args, cyc in ops:
                if opc != "copy":
                    continue
                src = shapes.get(args.strip().lstrip("%"), "")
                if "S(1)" not in src or "S(1)" in shape:
                    continue
                elems = b * h * h * co
                print(json.dumps({"case": case, "gen": g, "op": name, "from": src, "to": shape, "compiler": cyc,
                                  "out_bytes": elems * (2 if dt == "bf16" else 4), "elems": elems,
                                  "tpusim": [s.get(name) for s in sims]}), flush=True)


if __name__ == "__main__":
    main()
