#!/usr/bin/env python3
"""copy_in.py SEED N GENS [TPUSIM...]: libtpu probes of a copy INTO VMEM from HBM (needs libtpu).
Draws N random 1x1 convolutions with relu whose input x [B,H,W,Ci] arrives in a layout the
convolution does not read (asked for as NHWC {3,2,1,0}, NCHW {2,1,3,0} or {3,1,2,0}; the
compiler picks the parameter's layout itself: with 32 features W-minor {2,3,1,0}), compiles each for one device of each generation (GENS, e.g. v5e,v6e) and, for every top-level
`copy` of the compiled entry whose result is in VMEM (S(1)) and whose operand is in HBM, prints
one JSON line: the case, the generation, the copy's shapes, its estimated_cycles, and each tpusim
binary's cycles for that copy when it times the COMPILED program (as compare.py --compiled).
Finding (session 20, seed 7, 12 draws, data/copy_in.jsonl, tpusim columns: main b1c56ed9 then the
rule): a copy that moves the lanes costs 15.75 cycles on v5e and 12.97 on v6e per tile (8 rows of
128 lanes) of its HBM operand, bf16 and f32 alike (bf16[8,64,64,32] 32,256 / 26,560; tpusim
17,500 / 12,904 -> 32,256 / 26,563; copy_kind.c tpu__copy_in_transpose_tiles). A copy that keeps
the lanes (bf16[4,64,64,128] {3,2,1,0} -> {3,2,0,1}: 29,986 / 17,095) is not one (tpusim 0.70x).
(COPY_IN_SAVE=DIR keeps each compiled program there.) Example:
    python3 bench/fidelity/probes/copy_in.py 5 8 v5e,v6e build/tpusim
"""
import importlib.util, json, os, random, sys
HERE = os.path.dirname(os.path.abspath(__file__))
_spec = importlib.util.spec_from_file_location("copy_out", os.path.join(HERE, "copy_out.py"))
_co = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_co)

LAYOUTS = {"nhwc": "3,2,1,0", "nchw": "2,1,3,0", "nwhc": "3,1,2,0"}


def conv_hlo(dt, b, h, w, ci, co, lay):
    x = f"{dt}[{b},{h},{w},{ci}]"
    y = f"{dt}[{b},{h},{w},{co}]"
    return (f"HloModule p, entry_computation_layout={{({x}{{{LAYOUTS[lay]}}}, {dt}[1,1,{ci},{co}]{{3,2,1,0}})->{y}{{3,0,2,1}}}}\n\n"
            f"ENTRY e {{\n  x = {x}{{{LAYOUTS[lay]}}} parameter(0)\n  k = {dt}[1,1,{ci},{co}] parameter(1)\n"
            f"  c = {y} convolution(x, k), window={{size=1x1}}, dim_labels=b01f_01io->b01f\n"
            f"  z = {dt}[] constant(0)\n  zb = {y} broadcast(z), dimensions={{}}\n"
            f"  ROOT r = {y} maximum(c, zb)\n}}\n")


def main():
    seed, n, gens, tpusims = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3].split(","), sys.argv[4:]
    rng = random.Random(seed)
    for _ in range(n):
        dt = rng.choice(["bf16", "f32"])
        b = rng.choice([4, 8, 16])
        h = rng.choice([14, 28, 40, 56, 64, 96])
        ci, co = rng.choice([32, 64, 128, 256]), rng.choice([128, 256])
        lay = rng.choice(["nhwc", "nchw", "nwhc"])
        case = [dt, b, h, h, ci, co, lay]
        for g in gens:
            try:
                text = _co.compile_text(conv_hlo(*case), g)
            except Exception as e:  # noqa: BLE001 (libtpu's errors vary)
                print(json.dumps({"case": case, "gen": g, "error": str(e)[:200]}), flush=True)
                continue
            if os.environ.get("COPY_IN_SAVE"):
                open(os.path.join(os.environ["COPY_IN_SAVE"], "%s_%s.hlo" % ("_".join(map(str, case)), g)), "w").write(text)
            ops, shapes = _co.entry_ops(text)
            sims = [_co.sim_ops(t, text, g) for t in tpusims]
            for name, shape, opc, args, cyc in ops:
                src = shapes.get(args.strip().lstrip("%"), "")
                if opc != "copy" or "S(1)" in src or "S(1)" not in shape:
                    continue
                elems = b * h * h * ci
                print(json.dumps({"case": case, "gen": g, "op": name, "from": src, "to": shape, "compiler": cyc,
                                  "in_bytes": elems * (2 if dt == "bf16" else 4), "elems": elems,
                                  "tpusim": [s.get(name) for s in sims]}), flush=True)


if __name__ == "__main__":
    main()
