#!/usr/bin/env python3
"""xpf_tie.py (session 21): which of two same-size weights the XLA TPU compiler prefetches
across steps (cross_program_prefetch_index), against tpusim's choice.

    python3 bench/plan_memory/probes/xpf_tie.py [--tpusim build/tpusim] [--keep DIR]

libtpu compile-only (/work/shared/tools/tpu_compile.py, one device of v5e:2x2 and v6e:2x2),
a few seconds a case; writes xpf_tie.json beside this file. Shapes are made up (not the
corpus's): x bf16[2048,1024] (4 MiB, read by a norm first, so not a candidate), A and B
bf16[1024,2816] (5.5 MiB each), a = n.A, b = n.B with n = x * rsqrt(mean(x^2)).
XLA orders cross-program-prefetch candidates by DefaultCrossProgramPrefetchBufferInterval-
Comparator (memory_space_assignment/buffer_interval_comparator.cc): size, then the summed
elements of its uses' results (ElementsInRecursive of each using instruction's shape, after
fusion: a multi-output fusion counts every result), then the earlier latest use, then the
buffer id. The question: does the element-wise work joining a and b (fused into one of the
two matmuls by the compiler) make that matmul's weight the larger candidate?"""
import argparse, json, os, re, subprocess, sys, tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
TOOL = "/work/shared/tools/tpu_compile.py"
TOPO = {"v5e": "v5e:2x2", "v6e": "v6e:2x2"}

ADD = "add {\n a = f32[] parameter(0)\n b = f32[] parameter(1)\n ROOT s = f32[] add(a, b)\n}\n"
HEAD = """HloModule {name}
{add}ENTRY e {{
 x = bf16[2048,1024] parameter(0)
 {p1} = bf16[1024,2816] parameter(1)
 {p2} = bf16[1024,2816] parameter(2)
 xf = f32[2048,1024] convert(x)
 sq = f32[2048,1024] multiply(xf, xf)
 z = f32[] constant(0)
 ss = f32[2048] reduce(sq, z), dimensions={{1}}, to_apply=add
 k = f32[] constant(0.0009765625)
 kb = f32[2048] broadcast(k), dimensions={{}}
 ms = f32[2048] multiply(ss, kb)
 rs = f32[2048] rsqrt(ms)
 rb = f32[2048,1024] broadcast(rs), dimensions={{0}}
 nf = f32[2048,1024] multiply(xf, rb)
 n = bf16[2048,1024] convert(nf)
 a = bf16[2048,2816] dot(n, A), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}
 b = bf16[2048,2816] dot(n, B), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}
"""
SILU = (" na = bf16[2048,2816] negate(a)\n ea = bf16[2048,2816] exponential(na)\n"
        " one = bf16[] constant(1)\n ob = bf16[2048,2816] broadcast(one), dimensions={}\n"
        " da = bf16[2048,2816] add(ob, ea)\n sa = bf16[2048,2816] divide(a, da)\n")
CASES = {
    # SwiGLU: silu(a) * b, A the first parameter
    "swiglu": ("A", "B", SILU + " ROOT o = bf16[2048,2816] multiply(sa, b)\n}\n"),
    # the same with the parameters' order swapped (B is parameter 1)
    "swiglu_swapped": ("B", "A", SILU + " ROOT o = bf16[2048,2816] multiply(sa, b)\n}\n"),
    # SwiGLU whose silu(a) is also returned (a second result of the joining work)
    "swiglu_two": ("A", "B", SILU + " m = bf16[2048,2816] multiply(sa, b)\n"
                   " ROOT o = (bf16[2048,2816], bf16[2048,2816]) tuple(m, sa)\n}\n"),
    # a and b returned as they are: nothing joins them
    "apart": ("A", "B", " ROOT o = (bf16[2048,2816], bf16[2048,2816]) tuple(a, b)\n}\n"),
}


def compiler_choice(text, topo, d, keep, tag):
    src, out = os.path.join(d, "p.hlo"), os.path.join(d, "p.out.hlo")
    open(src, "w").write(text)
    if os.path.exists(out):
        os.remove(out)
    for _ in range(6):  # libtpu sometimes fails to start under load: try again
        subprocess.run([sys.executable, TOOL, src, topo, out], capture_output=True, text=True)
        if os.path.exists(out):
            break
    else:
        return None
    prog = open(out).read()
    if keep:
        open(os.path.join(keep, tag + ".hlo"), "w").write(prog)
    m = re.search(r"copy-start\(%([\w.]+)\), cross_program_prefetch_index=0", prog)
    if not m:
        return "-"
    name = m.group(1)
    m2 = re.search(r"%" + re.escape(name) + r" = \S+ parameter\((\d+)\)", prog)
    return m2.group(1) if m2 else name


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
    ap.add_argument("--keep", help="folder for the compiler's programs")
    a = ap.parse_args()
    res = {}
    with tempfile.TemporaryDirectory() as d:
        for name, (p1, p2, tail) in CASES.items():
            text = HEAD.format(name=name, add=ADD, p1=p1, p2=p2) + tail
            byidx = {"1": p1, "2": p2, "0": "x"}
            for gen, topo in TOPO.items():
                c = compiler_choice(text, topo, d, a.keep, f"{name}.{gen}")
                c = byidx.get(c, c)
                t = tpusim_choice(a.tpusim, text, gen, d)
                res[f"{name} {gen}"] = {"compiler": c, "tpusim": t}
                print(f"{name:15s} {gen}: compiler prefetches {c}, tpusim {t}", flush=True)
    json.dump(res, open(os.path.join(HERE, "xpf_tie.json"), "w"), indent=1, sort_keys=True)


if __name__ == "__main__":
    main()
