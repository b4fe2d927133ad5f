#!/usr/bin/env python3
"""group_lanes.py [CHIPS]: grouped convolutions with the batch in the lanes (session 18, grp;
needs libtpu, compile-only). For each (B, H, Cin, Cout, G, k, dtype) below, NHWC x HWIO, SAME,
feature_group_count G: the XLA TPU compiler's top-level ops (name, shape with layout,
estimated_cycles, iteration_bounds) per generation, one JSON line each, as committed in
data/group_lanes.jsonl. Its convolution kernel (`fusion`, [B,H,W,G,Cog]{0,4,3,2,1}: the batch
in the lanes) is what tile_conv.c lanes_cycles times: a fixed part plus, per output position of
[H, W, G], a position's and each filter tap's cycles (chips' conv_lanes_*_cycles)."""
import os, sys, re, json
os.environ.setdefault("TPU_ACCELERATOR_TYPE", "v5litepod-4")
os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import gen, jax, jax.numpy as jnp

CASES = [(8, H, 4 * G, 4 * G, G, k, "bf16") for H in (7, 14, 28) for G in (2, 8) for k in (1, 3, 5)] + [
    (8, 14, 16, 16, 4, 3, "f32"), (8, 14, 16, 16, 4, 1, "f32"), (64, 14, 16, 16, 4, 3, "bf16"),
    (128, 14, 16, 16, 4, 3, "bf16"), (4, 14, 16, 8, 4, 3, "bf16"), (16, 14, 64, 8, 4, 3, "bf16"),
    (32, 14, 64, 16, 4, 3, "f32"), (8, 14, 1024, 32, 8, 3, "bf16"), (8, 20, 96, 24, 6, 3, "bf16"),
    (16, 10, 12, 12, 3, 5, "f32"), (8, 12, 64, 32, 8, 7, "bf16")]

def gconv(G):
    return lambda x, w: jax.lax.conv_general_dilated(x, w, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"),
                                                     feature_group_count=G)

chips = sys.argv[1].split(",") if len(sys.argv) > 1 else ["v4", "v5e", "v5p", "v6e"]
for (B, H, Cin, Cout, G, k, dt) in CASES:
    d = jnp.bfloat16 if dt == "bf16" else jnp.float32
    for chip in chips:
        dev = gen.device(chip)
        txt = jax.jit(gconv(G)).lower(gen.sds((B, H, H, Cin), d, dev), gen.sds((k, k, Cin // G, Cout), d, dev)).compile().as_text()
        ops = []
        for line in txt[txt.rfind("\nENTRY"):].split("\n"):
            m = re.match(r"\s*(ROOT )?%(\S+) = (\S+) (\w+)\(", line)
            cyc = re.search(r'"estimated_cycles":"(\d+)"', line)
            if m and cyc:
                ib = re.search(r'"iteration_bounds":\[([^\]]*)\]', line)
                ops.append((m.group(2), m.group(3), int(cyc.group(1)), ib.group(1).replace('"', "") if ib else ""))
        print(json.dumps(dict(case=[B, H, Cin, Cout, G, k, dt], chip=chip, ops=ops)), flush=True)
