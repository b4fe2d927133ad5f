#!/usr/bin/env python3
"""mb_excess.py (session 26): the planner's LLaMA-7B step (bench/plan_memory llama7b_L4_1x4x2_mb2,
tools/plan/gen.py, v5e 2x4) with one factor changed at a time -- the number of microbatches (the
tokens per microbatch fixed), the layers, remat -- compiled by libtpu (compile-only) with
bench/plan_memory.py's judge child and a buffer-assignment dump, to relate memory_analysis()'s
temp beyond the compiler's own heap (`preallocated-temp`) to the step's shapes.

    nice python3 bench/plan_memory/probes/mb_excess.py [NAME ...]   # minutes each

Writes one JSON line per variant (temp, peak, heap = preallocated-temp, the dump's temp
allocations, tpusim's temp from build/tpusim); session 26's figures are in mb_excess.json."""
import glob, json, os, re, subprocess, sys, tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
sys.path.insert(0, os.path.join(ROOT, "bench"))
sys.path.insert(0, os.path.join(ROOT, "tools", "plan"))

# name: (layers, micro, tokens per microbatch, remat, mesh (data, fsdp, tensor))
VARIANTS = {
    "L4_mb1": (4, 1, 16384, True, (1, 4, 2)),
    "L4_mb2": (4, 2, 16384, True, (1, 4, 2)),
    "L4_mb4": (4, 4, 16384, True, (1, 4, 2)),
    "L2_mb2": (2, 2, 16384, True, (1, 4, 2)),
    "L4_mb2_t8k": (4, 2, 8192, True, (1, 4, 2)),
    "L4_mb2_noremat": (4, 2, 16384, False, (1, 4, 2)),
}


def program(name, d):
    import gen
    import plan as P
    L, mb, tok, remat, (dp, fs, tp) = VARIANTS[name]
    m = P.load_model(os.path.join(ROOT, "bench", "plan_models", "llama_7b.json"))
    m.update({"layers": L, "batch_tokens": mb * tok})
    st = gen.Step(m, dict(data=dp, fsdp=fs, tensor=tp, micro=mb, remat=remat, overlap=False, windowed=False,
                          donate=False, attention="dot_product", causal=False, layouts=False,
                          tp_windowed=False, alloc=False))
    why = st.check()
    if why:
        raise SystemExit(f"{name}: {why}")
    p = os.path.join(d, name + ".hlo")
    open(p, "w").write(st.module())
    return p


def child():
    src = open(os.path.join(ROOT, "bench", "plan_memory.py")).read()
    s = src.index("CHILD = r'''") + len("CHILD = r'''")
    return src[s:src.index("'''", s)]


def heap(dump):
    """(the HBM heap `preallocated-temp`, the most bytes of it occupied at once): the
    occupied bytes at a time are the union of the chunks (offset, size) of the heap's values
    live then, live ranges from the dump's HloLiveRange (phi values included)."""
    ba = glob.glob(os.path.join(dump, "*after_optimizations-buffer-assignment.txt"))
    lr = glob.glob(os.path.join(dump, "*after_optimizations-live-range.txt"))
    if not ba or not lr:
        return None, None
    rng = {}
    for line in open(lr[0]):
        m = re.match(r"    (\S+):(\d+)-(\d+)$", line)
        if m:
            rng[m.group(1)] = (int(m.group(2)), int(m.group(3)))
    pre, cur, vals = 0, False, []
    for line in open(ba[0]):
        m = re.match(r"allocation \d+: size (\d+)(.*)", line)
        if m:
            cur = m.group(2).startswith(", preallocated-temp")  # HBM (color 0) only
            pre += int(m.group(1)) if cur else 0
            continue
        m = re.match(r" value: <\d+ (\S+)(?: \(phi\))? @\d+> \(size=(\d+),offset=(\d+)\)", line) if cur else None
        if m:
            name = m.group(1) if "{" in m.group(1) else m.group(1) + "{}"
            if name in rng:
                vals.append((rng[name], int(m.group(3)), int(m.group(3)) + int(m.group(2))))
    by_t = {}
    for (s, e), a, b in vals:
        for t in range(s, e + 1):
            by_t.setdefault(t, []).append((a, b))
    occ = 0
    for iv in by_t.values():
        iv.sort()
        tot, cs, ce = 0, None, None
        for a, b in iv:
            if ce is None or a > ce:
                tot += (ce - cs) if ce is not None else 0
                cs, ce = a, b
            else:
                ce = max(ce, b)
        tot += (ce - cs) if ce is not None else 0
        occ = max(occ, tot)
    return pre, occ


def tpusim(p):
    r = subprocess.run([os.path.join(ROOT, "build", "tpusim"), "compile", p, "--emit", "asm", "--chip", "v5e"],
                       capture_output=True, text=True)
    line = next((x for x in r.stdout.splitlines() if x.startswith(".program")), "")
    f = {k: int(v) for k, v in re.findall(r"(hbm_\w+)=(\d+)", line)}
    return f.get("hbm_temp")


def main():
    names = sys.argv[1:] or list(VARIANTS)  # a NAME of VARIANTS, or an HLO file (a per-device program, v5e 2x4)
    with tempfile.TemporaryDirectory() as tmp:
        for n in names:
            p = n if n.endswith(".hlo") else program(n, tmp)
            n = os.path.basename(n)[:-4] if n.endswith(".hlo") else n
            dump = os.path.join(tmp, "dump_" + n)
            env = dict(os.environ, TPU_ACCELERATOR_TYPE="v5litepod-8", ALLOW_MULTIPLE_LIBTPU_LOAD="1",
                       XLA_FLAGS=f"--xla_dump_to={dump} --xla_dump_hlo_pass_re=NONE")
            r = subprocess.run([sys.executable, "-c", child(), "plan", p, "v5e:2x4", "8"], capture_output=True,
                               text=True, env=env)
            line = next((x for x in r.stdout.splitlines() if x.startswith("JUDGE ")), None)
            if not line:
                print(json.dumps({"name": n, "error": (r.stderr.strip().splitlines() or ["?"])[-1][:200]}), flush=True)
                continue
            j = json.loads(line[6:])
            pre, occ = heap(dump)
            keep = os.path.join("/tmp", "mb_excess_dumps", n)
            os.makedirs(keep, exist_ok=True)
            for f in glob.glob(os.path.join(dump, "*after_optimizations*")) + glob.glob(os.path.join(dump, "*memory-usage*")):
                subprocess.run(["cp", f, keep])
            subprocess.run(["cp", p, keep])
            out = {"name": n, "temp": j["temp"], "peak": j["peak"], "arg": j["arg"], "out": j["out"], "heap": pre,
                   "excess": j["temp"] - pre if pre is not None else None, "occupied_peak": occ,
                   "peak_minus_arg_out_occupied": j["peak"] - j["arg"] - j["out"] - occ if occ is not None else None,
                   "tpusim_temp": tpusim(p)}
            print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
