#!/usr/bin/env python3
"""heldout.py (session 27): an off-corpus held-out set for tpusim's HBM accounting -- planner
training steps (tools/plan/gen.py) of shapes, meshes, remat and microbatch settings that
bench/plan_memory.py's corpus does not have, compiled by libtpu (compile-only) with
bench/plan_memory.py's judge child; memory_analysis() beside tpusim's `.program` figures.

    flock /tmp/libtpu_probe.lock nice python3 bench/plan_memory/probes/heldout.py --judge [NAME ...]
    python3 bench/plan_memory/probes/heldout.py [--tpusim build/tpusim]   # seconds: the stored judge

The programs are written to heldout/NAME.hlo, the judge's figures to heldout/judge.json.
Nothing in tpusim may be fitted to these: they check that a rule found elsewhere generalizes."""
import json, os, re, statistics, subprocess, sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
DIR = os.path.join(HERE, "heldout")
JUDGE = os.path.join(DIR, "judge.json")
sys.path.insert(0, os.path.join(ROOT, "bench"))
sys.path.insert(0, os.path.join(ROOT, "tools", "plan"))

# name: (model file, layers, batch tokens, (data, fsdp, tensor), micro, remat, topology, optimizer)
VARIANTS = {
    "l3_8b_L2_1x8x1_remat": ("llama3_8b.json", 2, 8 * 2048, (1, 8, 1), 1, True, "v5e:2x4", None),
    "l3_8b_L2_2x4x1_noremat": ("llama3_8b.json", 2, 8 * 2048, (2, 4, 1), 1, False, "v5e:2x4", None),
    "llama7b_L2_1x2x4_remat": ("llama_7b.json", 2, 8 * 2048, (1, 2, 4), 1, True, "v5e:2x4", None),
    "llama7b_L2_1x8x1_remat_mb2": ("llama_7b.json", 2, 16 * 2048, (1, 8, 1), 2, True, "v5e:2x4", None),
    "mt16b_L2_1x4x2_noremat": ("maxtext_16b.json", 2, 8 * 2048, (1, 4, 2), 1, False, "v5e:2x4", None),
    "llama7b_L2_4x2x1_remat_sgd": ("llama_7b.json", 2, 8 * 2048, (4, 2, 1), 1, True, "v5e:2x4", "sgd"),
    "mt22b_L2_1x4x2_noremat": ("maxtext_22b.json", 2, 8 * 2048, (1, 4, 2), 1, False, "v5p:2x2x2", None),
    "mt52b_L2_1x8x1_remat": ("maxtext_52b.json", 2, 8 * 2048, (1, 8, 1), 1, True, "v5p:2x2x2", None),
    "gpt3_L2_1x8x1_remat_mb2": ("gpt3_175b.json", 2, 16 * 2048, (1, 8, 1), 2, True, "v5p:2x2x2", None),
    "llama70b_L2_2x2x2_noremat": ("llama_70b.json", 2, 4 * 4096, (2, 2, 2), 1, False, "v5p:2x2x2", None),
}
CHIP = {"v5e:2x4": "v5e", "v5p:2x2x2": "v5p"}


def write(name):
    import gen
    import plan as P
    mf, L, tok, (dp, fs, tp), mb, remat, topo, opt = VARIANTS[name]
    m = P.load_model(os.path.join(ROOT, "bench", "plan_models", mf))
    m.update({"layers": L, "batch_tokens": tok})
    if m.get("seq", 0) > 4096:  # llama-3: 2,048-token sequences, so the batch splits over 8 chips
        m["seq"] = 2048
    if opt:
        m["optimizer"] = opt
    st = gen.Step(m, dict(data=dp, fsdp=fs, tensor=tp, micro=mb, remat=remat, overlap=False, windowed=False,
                          donate=False, attention="dot_product", causal=False, layouts=False))
    why = st.check()
    if why:
        raise SystemExit(f"{name}: {why}")
    p = os.path.join(DIR, name + ".hlo")
    open(p, "w").write(st.module())
    return p


def child():
    src = open(os.path.join(ROOT, "bench", "plan_memory.py")).read()
    s = src.index("CHILD = r'''") + len("CHILD = r'''")
    return src[s:src.index("'''", s)]


def tpusim(tp, p, chip):
    r = subprocess.run([tp, "compile", p, "--emit", "asm", "--chip", chip], capture_output=True, text=True)
    line = next((x for x in r.stdout.splitlines() if x.startswith(".program")), "")
    f = {k: int(v) for k, v in re.findall(r"(hbm_\w+)=(\d+)", line)}
    return {"arg": f.get("hbm_arg", 0), "out": f.get("hbm_out", 0), "temp": f.get("hbm_temp", 0),
            "alias": f.get("hbm_alias", 0)}


def main():
    a = sys.argv[1:]
    tp = os.path.join(ROOT, "build", "tpusim")
    if "--tpusim" in a:
        i = a.index("--tpusim"); tp = a[i + 1]; del a[i:i + 2]
    judge = "--judge" in a
    names = [n for n in a if not n.startswith("--")] or list(VARIANTS)
    os.makedirs(DIR, exist_ok=True)
    j = json.load(open(JUDGE)) if os.path.exists(JUDGE) else {}
    if judge:
        env = dict(os.environ, TPU_ACCELERATOR_TYPE="v5litepod-8", ALLOW_MULTIPLE_LIBTPU_LOAD="1")
        for n in names:
            p = write(n)
            topo = VARIANTS[n][6]
            r = subprocess.run([sys.executable, "-c", child(), "plan", p, topo, "8"], capture_output=True,
                               text=True, env=env)
            line = next((x for x in r.stdout.splitlines() if x.startswith("JUDGE ")), None)
            if not line:
                print(n, "no judge:", (r.stderr.strip().splitlines() or ["?"])[-1][:200], flush=True)
                continue
            j[n] = json.loads(line[6:])
            json.dump(j, open(JUDGE, "w"), indent=1, sort_keys=True)
            print(n, "judged", flush=True)
    errs = []
    for n in names:
        p = os.path.join(DIR, n + ".hlo")
        if n not in j or not os.path.exists(p):
            continue
        c = j[n]
        t = tpusim(tp, p, CHIP[VARIANTS[n][6]])
        tot_c = c["arg"] + c["out"] + c["temp"] - c["alias"]
        tot_t = t["arg"] + t["out"] + t["temp"] - t["alias"]
        e = 100.0 * (tot_t - tot_c) / tot_c
        errs.append(abs(e))
        M = 1 << 20
        print(f"  {n:30s} temp {t['temp'] / M:9.1f} / {c['temp'] / M:9.1f} MiB  total {tot_t / M:9.1f} / "
              f"{tot_c / M:9.1f}  {e:+.1f} %")
    if errs:
        print(f"held-out: {len(errs)} programs, |total error| median {statistics.median(errs):.1f} %, "
              f"worst {max(errs):.1f} %, within 10 %: {sum(e <= 10 for e in errs)}/{len(errs)}")


if __name__ == "__main__":
    main()
