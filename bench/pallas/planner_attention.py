#!/usr/bin/env python3
"""planner_attention.py: the planner's attention (tools/plan/gen.py) against
pallas.ops.tpu.flash_attention lowered by jax as a real pallas_call (causal, bf16, blocks of
512), one layer's forward at b=1, 8 heads of 128, on tpusim. The planner writes that kernel
itself, instantiated from tools/plan/flash/ (its default: "planner" column; the transposes
of q, k, v to the kernel's layout and of its output back are in it), or with "kernel":
"fusion" a kOutput fusion of q, k and v whose block scores and running max/sum stay on chip
("fusion" column).

    python3 bench/pallas/planner_attention.py gen    # (jax) lower the pallas_call programs
    python3 bench/pallas/planner_attention.py [--tpusim build/tpusim]

The planner's fusion takes q, k, v as [b, S, h, d] (the QKV projection's layout) and gives the
output back as [b*S, h*d] with the max and sum; the kernel takes [b, h, S, d]. Both are causal
with blocks of 512: the fusion computes key block j for the query rows it reaches, the kernel
skips the block pairs above the diagonal. Each size is split tune/test by sha1(name)[0]."""
import hashlib
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
TIMING = os.path.join(HERE, "timing")
SIZES = [(1, 8, 2048, 128), (1, 8, 4096, 128), (1, 8, 8192, 128)]
CHIPS = ["v5e", "v5p", "v6e"]


def kernel_name(b, h, s, d):
    return "pallas_flash_attention_bf16_%dx%dx%dx%d" % (b, h, s, d)


def split(name):
    return "test" if hashlib.sha1(name.encode()).digest()[0] % 2 else "tune"


def gen():
    os.environ.setdefault("TPU_ACCELERATOR_TYPE", "v5litepod-4")
    os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")
    import jax
    import jax.numpy as jnp
    from jax.experimental import topologies
    from jax.experimental.pallas.ops.tpu import flash_attention as fa
    from jax.sharding import SingleDeviceSharding
    sys.path.insert(0, os.path.join(ROOT, "python", "tpusim"))
    import pallas_decode
    dev = topologies.get_topology_desc(platform="tpu", topology_name="v5e:2x2").devices[0]
    for b, h, s, d in SIZES:
        st = jax.ShapeDtypeStruct((b, h, s, d), jnp.bfloat16, sharding=SingleDeviceSharding(dev))
        bs = fa.BlockSizes(block_q=512, block_k_major=512, block_k=512, block_b=1)
        f = lambda q, k, v: fa.flash_attention(q, k, v, causal=True, block_sizes=bs)  # noqa: E731
        text = pallas_decode.decode_hlo(jax.jit(f).lower(st, st, st).as_text(dialect="hlo"))
        open(os.path.join(TIMING, kernel_name(b, h, s, d) + ".hlo"), "w").write(text)


def planner_program(b, h, s, d, kernel=True):
    """The planner's forward attention alone on parameters q4, k4, v4: the library's kernel
    instantiated from tools/plan/flash/ (kernel True, the planner's default) or the fusion
    standing for it ("fusion")."""
    sys.path.insert(0, os.path.join(ROOT, "tools", "plan"))
    import gen as plan
    m = dict(layers=1, d_model=h * d, heads=h, head_dim=d, mlp=4 * h * d, vocab=1024, seq=s,
             batch_tokens=b * s, dtype="bf16")
    st = plan.Step(m, dict(data=1, fsdp=1, tensor=1, micro=1, remat="off", kernel=kernel))
    g = plan.Gen()
    for k, nm in enumerate(("q4", "k4", "v4")):
        g.e(f"{nm} = {plan.ty('bf16', (b, s, h, d))} parameter({k})")
    st.common_consts(g)
    r = st.flash_fwd(g)
    outs = [r["ctx"], r["mx"], r["sm"]]
    types = []
    for o in outs:
        line = next(x for x in g.lines if x.strip().startswith(o + " = "))
        types.append(line.split(" = ", 1)[1].split(" ", 1)[0])
    body = "\n".join(g.lines)
    text = "\n".join(st.extra) + body
    reds = [f"{op}_{dt} {{\n  a = {dt}[] parameter(0)\n  b = {dt}[] parameter(1)\n  ROOT r = {dt}[] {hlo}(a, b)\n}}\n"
            for dt in ("bf16", "f32") for op, hlo in (("add", "add"), ("max", "maximum"))
            if f"to_apply={op}_{dt}" in text]
    return ("HloModule planner_attention\n\n" + "\n".join(reds) + "\n".join(st.extra) + "\nENTRY main {\n" + body +
            f"\nROOT out = ({', '.join(types)}) tuple({', '.join(outs)})\n}}\n")


def step_us(cli, prog, chip):
    r = subprocess.run([cli, "run", prog, "--mode", "timing", "--chip", chip, "--no-cache"], capture_output=True, text=True)
    m = re.search(r"step time: ([0-9.]+) (us|ms)", r.stdout + r.stderr)
    if not m:
        return None, (r.stderr.strip().splitlines() or ["failed"])[-1]
    return float(m.group(1)) * (1000.0 if m.group(2) == "ms" else 1.0), None


def main(argv):
    if argv[:1] == ["gen"]:
        gen()
        return 0
    import tempfile
    cli = argv[argv.index("--tpusim") + 1] if "--tpusim" in argv else os.path.join(ROOT, "build", "tpusim")
    print("%-5s %-18s %-4s %14s %14s %14s %7s %7s" % ("split", "b x h x S x d", "chip", "fusion (us)", "planner (us)",
                                                   "pallas (us)", "fus/pal", "pln/pal"))
    rows = sorted(SIZES, key=lambda z: split(kernel_name(*z)) != "test")
    for z in rows:
        kp = os.path.join(TIMING, kernel_name(*z) + ".hlo")
        if not os.path.exists(kp):
            print("missing %s: run `planner_attention.py gen` (jax)" % kp)
            continue
        progs = []
        for kern in ("fusion", True):
            with tempfile.NamedTemporaryFile("w", suffix=".hlo", delete=False) as f:
                f.write(planner_program(*z, kernel=kern))
                progs.append(f.name)
        try:
            for chip in CHIPS:
                (a, ea), (p, ep) = step_us(cli, progs[0], chip), step_us(cli, progs[1], chip)
                k, ek = step_us(cli, kp, chip)
                print("%-5s %-18s %-4s %14s %14s %14s %7s %7s" % (
                    split(kernel_name(*z)), "x".join(map(str, z)), chip, "%.1f" % a if a else ea, "%.1f" % p if p else ep,
                    "%.1f" % k if k else ek, "%.2f" % (a / k) if a and k else "-", "%.2f" % (p / k) if p and k else "-"))
        finally:
            for pp in progs:
                os.unlink(pp)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
