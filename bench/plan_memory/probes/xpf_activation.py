#!/usr/bin/env python3
"""xpf_activation.py (session 20): which entry parameter the XLA TPU compiler prefetches across
steps (cross_program_prefetch_index) when the largest matmul operand is also read by
element-wise work (an SGD update, a scaled copy) or by a lone reduce, against tpusim's choice.

    python3 bench/plan_memory/probes/xpf_activation.py [--tpusim build/tpusim]

libtpu compile-only (/work/shared/tools/tpu_compile.py, one device of v5e:2x2 and v6e:2x2),
a few seconds a case; writes xpf_activation.json beside this file. Shapes are made up (not
the corpus's): x f32[1024,1536] (6 MiB), W f32[1536,6144] (36 MiB); h = x.W, g = x^T.h.
XLA's memory-space assignment takes a parameter as a cross-program-prefetch candidate only
when no use LooksLikeAnActivation (memory_space_assignment: an element-wise user is one);
the TPU compiler's layout bitcast fusions around a matmul operand hide the dot-lhs test,
so x stays a candidate."""
import argparse, json, os, re, subprocess, sys, tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
TOOL = "/work/shared/tools/tpu_compile.py"
TOPO = {"v5e": "v5e:2x2", "v6e": "v6e:2x2"}

ADD = "add {\n a = f32[] parameter(0)\n b = f32[] parameter(1)\n ROOT s = f32[] add(a, b)\n}\n"
HEAD = """HloModule {name}
{add}ENTRY e {{
 x = f32[1024,1536] parameter(0)
 W = f32[1536,6144] parameter(1)
 h = f32[1024,6144] dot(x, W), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}
 g = f32[1536,6144] dot(x, h), lhs_contracting_dims={{0}}, rhs_contracting_dims={{0}}
"""
CASES = {
    # W read by the dot and by the update W - 0.01 g (element-wise): not a candidate
    "sgd": " c = f32[] constant(0.01)\n cb = f32[1536,6144] broadcast(c), dimensions={}\n"
           " u = f32[1536,6144] multiply(g, cb)\n ROOT w1 = f32[1536,6144] subtract(W, u)\n}\n",
    # W read by the dot only: the larger candidate
    "dot_only": " ROOT r = (f32[1024,6144], f32[1536,6144]) tuple(h, g)\n}\n",
    # W read by the dot and by W * 2 returned beside g
    "scaled": " c = f32[] constant(2)\n cb = f32[1536,6144] broadcast(c), dimensions={}\n"
              " w2 = f32[1536,6144] multiply(W, cb)\n ROOT r = (f32[1536,6144], f32[1536,6144]) tuple(g, w2)\n}\n",
    # W read by the dot and by an unfused reduce of all of it (XLA follows a reduce's users)
    "reduced": " z = f32[] constant(0)\n s = f32[] reduce(W, z), dimensions={0,1}, to_apply=add\n"
               " ROOT r = (f32[1536,6144], f32[]) tuple(g, s)\n}\n",
}


def compiler_choice(text, topo, d):
    src, out = os.path.join(d, "p.hlo"), os.path.join(d, "p.out.hlo")
    open(src, "w").write(text)
    p = subprocess.run([sys.executable, TOOL, src, topo, out], capture_output=True, text=True)
    if not os.path.exists(out):
        return None
    prog = open(out).read()
    m = re.search(r"copy-start\(%([\w.]+)\), cross_program_prefetch_index=0", prog)
    if not m:
        return "-"
    name = m.group(1)
    m2 = re.search(r"%" + re.escape(name) + r" = \S+ parameter\((\d+)\)", prog)
    return {"0": "x", "1": "W"}.get(m2.group(1), name) if m2 else name


def tpusim_choice(tpusim, text, chip, d):
    src, rep = os.path.join(d, "t.hlo"), os.path.join(d, "r.json")
    open(src, "w").write(text)
    p = subprocess.run([tpusim, "run", src, "--mode", "timing", "--chip", chip, "--report", rep, "--quiet"],
                       capture_output=True, text=True)
    if p.returncode:
        return None
    x = json.load(open(rep)).get("hbm", {}).get("cross_program_prefetch") or {}
    return x.get("buffer", "-")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tpusim", default=os.path.join(ROOT, "build", "tpusim"))
    a = ap.parse_args()
    res = {}
    with tempfile.TemporaryDirectory() as d:
        for name, tail in CASES.items():
            text = HEAD.format(name=name, add=ADD if "reduce(" in tail else "") + tail
            for gen, topo in TOPO.items():
                c, t = compiler_choice(text, topo, d), tpusim_choice(a.tpusim, text, gen, d)
                res[f"{name} {gen}"] = {"compiler": c, "tpusim": t}
                print(f"{name:9s} {gen}: compiler prefetches {c}, tpusim {t}", flush=True)
    json.dump(res, open(os.path.join(HERE, "xpf_activation.json"), "w"), indent=1, sort_keys=True)


if __name__ == "__main__":
    main()
