#!/usr/bin/env python3
"""gathered_reduce.py [--measure] [CHIPS]: libtpu probes of a reduce over the rows a gather
read (an embedding bag's sum; compile/backend/layout.c gathered_operand). The XLA TPU compiler
runs the gather as a kCustom gather_fusion that takes in no consumer, and times the reduce
after it as the unfused (lone) reduce of a parameter of its tiled shape: f32 [256,50,1024]
summed over axis 1 after a gather costs what the lone reduce of a parameter f32[256,56,1024]
does (v4 318,208, v5e 442,208). An elementwise op after a gather is not lone (mul_after_gather).
With --measure (needs libtpu: /work/shared/tools/tpu_compile.py) each case is compiled per
generation and data/gathered_reduce.json rewritten; without, the committed figures are read.
Prints the compiler's and tpusim's cycles of the case's reduce (or multiply) kernel."""
import json, os, re, subprocess, sys, tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(HERE, "data", "gathered_reduce.json")
sys.path.insert(0, HERE)

from libtpu import TOPO, PRESET, TPUSIM, compile_hlo

ADD = "add {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n  ROOT c = f32[] add(a, b)\n}\n\n"


def param_sum(r):
    return (f"HloModule r\n\n{ADD}ENTRY main {{\n  x = f32[256,{r},1024] parameter(0)\n  z = f32[] constant(0)\n"
            f"  ROOT r = f32[256,1024] reduce(x, z), dimensions={{1}}, to_apply=add\n}}\n")


def gather_sum(n, b, k, d):
    return (f"HloModule g\n\n{ADD}ENTRY main {{\n  t = f32[{n},{d}] parameter(0)\n  i = s32[{b},{k},1] parameter(1)\n"
            f"  g = f32[{b},{k},{d}] gather(t, i), offset_dims={{2}}, collapsed_slice_dims={{0}}, start_index_map={{0}}, "
            f"index_vector_dim=2, slice_sizes={{1,{d}}}\n  z = f32[] constant(0)\n"
            f"  ROOT r = f32[{b},{d}] reduce(g, z), dimensions={{1}}, to_apply=add\n}}\n")


MUL = ("HloModule m\n\nENTRY main {\n  t = f32[32000,1024] parameter(0)\n  i = s32[4096,1] parameter(1)\n"
       "  g = f32[4096,1024] gather(t, i), offset_dims={1}, collapsed_slice_dims={0}, start_index_map={0}, "
       "index_vector_dim=1, slice_sizes={1,1024}\n  c = f32[] constant(2)\n  b = f32[4096,1024] broadcast(c), dimensions={}\n"
       "  ROOT m = f32[4096,1024] multiply(g, b)\n}\n")

CASES = {"param_sum_256x50x1024": param_sum(50), "param_sum_256x56x1024": param_sum(56),
         "gather_sum_1000_256x50x1024": gather_sum(1000, 256, 50, 1024),
         "gather_sum_8192_128x20x512": gather_sum(8192, 128, 20, 512),
         "mul_after_gather_4096x1024": MUL}


def kernel_cycles(text):
    """The estimated cycles of the compiled entry's reduce or multiply kernel."""
    entry = text[text.rfind("\nENTRY"):]
    for line in entry.splitlines():
        name = line.split(" = ")[0].strip().lstrip("%").replace("ROOT ", "").lstrip("%")
        if re.search(r"= \S+ (reduce|fusion)\(", line) and "gather" not in name and "clamp" not in name:
            m = re.search(r'"estimated_cycles":"(\d+)"', line)
            if m and (" reduce(" in line or "reduce" in name or "multiply" in name):
                return int(m.group(1))
    return None


def tpusim_kernel(text, gen, d):
    src, rep = os.path.join(d, "t.hlo"), os.path.join(d, "r.json")
    open(src, "w").write(text)
    p = subprocess.run([TPUSIM, "run", src, "--mode", "timing", "--chip", PRESET.get(gen, gen), "--report", rep, "--quiet"],
                       capture_output=True, text=True, env=dict(os.environ, TPUSIM_CACHE="off"))
    if p.returncode: return None
    ops = [o for o in json.load(open(rep))["ops"] if o["kind"] in ("reduce", "multiply") or o["kind"].startswith("fusion")]
    return max(o["cycles"] for o in ops) if ops else None


def main():
    args = [a for a in sys.argv[1:] if a != "--measure"]
    chips = (args[0] if args else "v4,v5e,v5p,v6e").split(",")
    data = json.load(open(DATA)) if os.path.exists(DATA) else {}
    with tempfile.TemporaryDirectory() as d:
        for name, text in CASES.items():
            for chip in chips:
                key = f"{name}/{chip}"
                if "--measure" in sys.argv:
                    _, out = compile_hlo(text, TOPO[chip], d)
                    data[key] = kernel_cycles(out) if out else None
                c = data.get(key)
                if c:
                    t = tpusim_kernel(text, chip, d)
                    print(f"{key:40s} compiler {c:8d} tpusim {t:8d} {100.0 * (t / c - 1):+7.1f} %")
    if "--measure" in sys.argv:
        json.dump(data, open(DATA, "w"), indent=1, sort_keys=True)


if __name__ == "__main__":
    main()
