#!/usr/bin/env python3
"""scan_state.py (session 19): FSDP scan steps outside the corpus, to see where the XLA TPU
compiler keeps the state of the windowed-einsum loops inside a scan's backward body.

    python3 bench/plan_memory/probes/scan_state.py          # libtpu compile-only, a minute each
    python3 bench/spmd_partdump.py --tpu bench/plan_memory/probes/scan_state
    nice python3 bench/plan_memory/probes/scan_state.py --judge   # memory_analysis(), dump

Writes bench/plan_memory/probes/scan_state/NAME/ as bench/spmd/gen.py writes its cases
(prog.hlo, tpu.hlo, meta.json); spmd_partdump adds tpu_part.hlo (tpusim's input) and --judge
prints memory_analysis() and the buffer-assignment dump's memory spaces of the loops' state
(judge.json beside this file). The shapes differ from bench/spmd's fsdp_scan_step (4 layers
of bf16[2048,2048], 8192 tokens)."""
import glob, importlib.util, json, os, re, subprocess, sys, tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
OUT = os.path.join(HERE, "scan_state")


def load(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def write():
    g = load(os.path.join(ROOT, "bench", "spmd", "gen.py"), "spmd_gen")
    import jax, jax.numpy as jnp
    g.OUT = OUT
    scan = lambda act: (lambda x, ws: jax.lax.scan(lambda c, w: (act(c @ w), None), x, ws)[0])
    # (name, layers, d, tokens, activation)
    for name, L, d, tok, act in [("scan3_tanh_t4096", 3, 2048, 4096, jnp.tanh),
                                 ("scan2_relu_t16384", 2, 2048, 16384, jax.nn.relu)]:
        g.run(name, g.train(scan(act), 1), [((L, d, d), g.BF), ((tok, d), g.BF)],
              [(None, "fsdp", None), ("fsdp", None)], "v5e:2x4", (8,), ("fsdp",))


def judge():
    pm = load(os.path.join(ROOT, "bench", "plan_memory.py"), "plan_memory")
    res = {}
    for d in sorted(glob.glob(os.path.join(OUT, "*", ""))):
        d = d.rstrip("/")
        name = os.path.basename(d)
        dump = tempfile.mkdtemp(prefix="scan_state.")
        env = dict(os.environ, TPU_ACCELERATOR_TYPE="v5litepod-8", ALLOW_MULTIPLE_LIBTPU_LOAD="1",
                   XLA_FLAGS=f"--xla_dump_to={dump}")
        r = subprocess.run([sys.executable, "-c", pm.CHILD, "spmd", d, "v5e:2x4", "8"], capture_output=True,
                           text=True, env=env)
        line = next((x for x in r.stdout.splitlines() if x.startswith("JUDGE ")), None)
        if not line:
            print(f"{name}: no figure", r.stderr[-300:])
            continue
        j = json.loads(line[6:])
        ba = sorted(glob.glob(os.path.join(dump, "*after_optimizations-buffer-assignment.txt")))
        phis = {"hbm": 0, "vmem": 0}
        if ba:  # the loops' state values (phi) of 1 MiB or more, by memory space
            for m in re.finditer(r"<\d+ \S+ \(phi\) @(\d+)> \(size=(\d+),", open(ba[0]).read()):
                if int(m.group(2)) >= 1 << 20:
                    phis["vmem" if m.group(1) == "1" else "hbm"] += 1
        j["loop_state_values_1MiB"] = phis
        res[name] = j
        print(name, json.dumps(j))
    with open(os.path.join(HERE, "scan_state.judge.json"), "w") as fh:
        json.dump(res, fh, indent=1, sort_keys=True)


if __name__ == "__main__":
    judge() if "--judge" in sys.argv else write()
