#!/usr/bin/env python3
"""v4_relayout.py [TPUSIM]: libtpu probes (compile-only, v4:2x2x1) of v4's sublane relayout
copies (chips/v4.json relayout_tile_cycles, tile.c relayout_tiles), outside the corpora:
x * 2 transposed keeping the lanes' dimension, f32/bf16, 10 shapes. The compiler fuses most
into one kernel; f32[2,40,40,256] -> (1,2,0,3) is a fusion into CMEM (S(3)) and a copy into
{3,2,1,0:T(2,128)} of 3,200 tiles: 46,816 cycles; tpusim 15,201 without the v4 price, 50,964
with it (whole program 70,024: -57.3 % -> -6.2 %). Left: the fused transposes writing
T(2,128) tiles (bf16[2,40,40,256] -> (1,2,0,3): 41,530 against tpusim 14,676). Prints per
probe the compiler's entry sum and tpusim's step cycles (v4:core). Needs jax[tpu] (libtpu)."""
import json, os, re, subprocess, sys, tempfile
os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path = [p for p in sys.path if os.path.abspath(p or ".") != HERE]  # probes/libtpu.py is not libtpu
import jax, jax.numpy as jnp
from jax.experimental import topologies
from jax.sharding import SingleDeviceSharding
import jaxlib._hlo as H

ROOT = os.path.join(HERE, "..", "..", "..")
tpusim = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "build", "tpusim")
dev = topologies.get_topology_desc(platform="tpu", topology_name="v4:2x2x1").devices[0]
SHAPES = (((4, 56, 56, 128), (1, 0, 2, 3)), ((2, 40, 40, 256), (1, 2, 0, 3)), ((8, 24, 24, 128), (1, 2, 0, 3)),
          ((3, 64, 32, 384), (1, 0, 2, 3)), ((6, 30, 30, 128), (2, 1, 0, 3)))
with tempfile.TemporaryDirectory() as td:
    for dt in (jnp.bfloat16, jnp.float32):
        for shp, perm in SHAPES:
            spec = jax.ShapeDtypeStruct(shp, dt, sharding=SingleDeviceSharding(dev))
            c = jax.jit(lambda x, perm=perm: jnp.transpose(x * 2, perm)).lower(spec).compile()
            o = H.HloPrintOptions()
            o.print_large_constants = True
            text = c.runtime_executable().hlo_modules()[0].to_string(o)
            path, rep = os.path.join(td, "p.hlo"), os.path.join(td, "r.json")
            open(path, "w").write(text)
            entry = text[text.rfind("\nENTRY"):]
            comp = sum(int(x) for x in re.findall(r'"estimated_cycles":"(\d+)"', entry))
            subprocess.run([tpusim, "run", path, "--mode", "timing", "--chip", "v4:core", "--report", rep, "--quiet"],
                           check=True, env=dict(os.environ, TPUSIM_CACHE="off"))
            sim = json.load(open(rep))["step"]["cycles"]
            print("%-5s %-18s %-10s compiler %7d tpusim %7d (%+.1f %%)" % ({"bfloat16": "bf16", "float32": "f32"}[jnp.dtype(dt).name], shp, perm, comp, sim,
                                                                          100.0 * (sim / comp - 1)))
