#!/usr/bin/env python3
"""Max |error| of f32 add-reduces against the float64 sum, per back end: `ref` (the
sequential fold) and `tpu` (the vector unit's order, docs/numerics.md reduce), with numpy's
pairwise sum for scale. Seeded normals; several shapes and axes.

    python3 bench/reduce_error.py [build/tpusim]
"""
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np

tpusim = sys.argv[1] if len(sys.argv) > 1 else "build/tpusim"
rng = np.random.default_rng(1)
cases = [((1000000,), "{0}"), ((1000, 1000), "{0,1}"), ((1000, 1000), "{1}"), ((1000, 1000), "{0}"),
         ((64, 125, 128), "{1,2}"), ((100, 10000), "{1}"), ((10000, 100), "{0}"), ((4, 250000), "{1}")]
for shape, dims in cases:
    x = rng.standard_normal(shape).astype(np.float32)
    dl = [int(d) for d in dims.strip("{}").split(",")]
    oshape = [s for i, s in enumerate(shape) if i not in dl]
    sh = lambda s: "f32[" + ",".join(map(str, s)) + "]"
    src = ("HloModule m\nadd {\n a = f32[] parameter(0)\n b = f32[] parameter(1)\n ROOT r = f32[] add(a, b)\n}\n"
           f"ENTRY e {{\n x = {sh(shape)} parameter(0)\n z = f32[] constant(0)\n ROOT r = {sh(oshape)} reduce(x, z), dimensions={dims}, to_apply=add\n}}\n")
    d = tempfile.mkdtemp(prefix="reduce_error_")
    open(d + "/p.hlo", "w").write(src); np.save(d + "/x.npy", x)
    exact = x.astype(np.float64).sum(axis=tuple(dl))
    res = []
    for be in ("ref", "tpu"):
        subprocess.run([tpusim, "run", d + "/p.hlo", "-i", d + "/x.npy", "-o", d + "/" + be, "--backend", be], check=True, capture_output=True)
        fs = [f for f in os.listdir(d + "/" + be) if f.endswith(".npy")]
        y = np.load(d + "/" + be + "/" + fs[0]).astype(np.float64)
        res.append(np.max(np.abs(y - exact)))
    npy = np.max(np.abs(x.sum(axis=tuple(dl)).astype(np.float64) - exact))
    shutil.rmtree(d)
    print(f"{str(shape):18s} dims={dims:6s} max|err| ref(sequential)={res[0]:.3e} tpu(vector)={res[1]:.3e} numpy(pairwise)={npy:.3e}")
