#!/usr/bin/env python3
"""ep_gap.py (session 25): bench/spmd ep_moe_fwd with its expert capacity C changed (1024 in
the case; every bracketed dimension 1024 of prog.hlo becomes C), compiled by libtpu
(compile-only, v5e 2x4) with bench/plan_memory.py's judge child and a buffer-assignment dump,
to see whether the expert-input dot's result, bf16[8,C,2048], the output of w2's async
all-gather continuation fusion, is in VMEM (S(1)) or in the HBM heap.

    nice python3 bench/plan_memory/probes/ep_gap.py [C ...]    # about a minute each

Prints memory_analysis() temp and the dot result's memory space, size and offset; the figures
of session 25 are in ep_gap.json and the README beside this file."""
import glob, json, os, re, shutil, subprocess, sys, tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
CASE = os.path.join(ROOT, "bench", "spmd", "cases", "ep_moe_fwd")


def child():
    src = open(os.path.join(ROOT, "bench", "plan_memory.py")).read()
    s = src.index("CHILD = r'''") + len("CHILD = r'''")
    return src[s:src.index("'''", s)]


def probe(c, tmp):
    d = os.path.join(tmp, f"ep{c}")
    shutil.copytree(CASE, d)
    p = os.path.join(d, "prog.hlo")
    text = re.sub(r"\[([0-9,]*)\]", lambda m: "[" + ",".join(str(c) if x == "1024" else x
                                                            for x in m.group(1).split(",")) + "]",
                  open(p).read())
    open(p, "w").write(text)
    dump = os.path.join(tmp, f"dump{c}")
    env = dict(os.environ, TPU_ACCELERATOR_TYPE="v5litepod-8", ALLOW_MULTIPLE_LIBTPU_LOAD="1",
               XLA_FLAGS=f"--xla_dump_to={dump}")
    r = subprocess.run([sys.executable, "-c", child(), "spmd", d, "v5e:2x4", "8"], capture_output=True,
                       text=True, env=env)
    line = next((x for x in r.stdout.splitlines() if x.startswith("JUDGE ")), None)
    if not line:
        return {"C": c, "error": (r.stderr.strip().splitlines() or ["?"])[-1][:200]}
    out = {"C": c, "temp": json.loads(line[6:])["temp"]}
    ba = glob.glob(os.path.join(dump, "*after_optimizations-buffer-assignment.txt"))[0]
    shape = f"bf16[8,{c},2048]{{2,1,0"
    for v in open(ba):
        m = re.match(r" value: <\d+ (\S+)\{0\} @(\d+)> \(size=(\d+),offset=(\d+)\): " + re.escape(shape), v)
        if m and m.group(1).startswith("fusion"):
            out.update(value=m.group(1) + "{0}", space="S(1)" if m.group(2) == "1" else "HBM",
                       bytes=int(m.group(3)), offset=int(m.group(4)))
    return out


def main():
    cs = [int(x) for x in sys.argv[1:]] or [960, 1016, 1024, 1032]
    with tempfile.TemporaryDirectory() as tmp:
        for c in cs:
            print(json.dumps(probe(c, tmp)), flush=True)


if __name__ == "__main__":
    main()
