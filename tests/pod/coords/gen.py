#!/usr/bin/env python3
"""gen.py: writes tests/pod/coords/*.json, the physical coordinates JAX (libtpu's
compile-only topologies, no TPU needed) gives each device id of several TPU slices. The
C unit test tests/unit/pod/test_topology.c checks tpu_topology_coords against them.

Needs jax[tpu] (libtpu): python3 -m venv --system-site-packages V && V/bin/pip install
"jax[tpu]"; then V/bin/python tests/pod/coords/gen.py (run from the repository root).
Written with jax 0.10.2, libtpu 0.0.42.1."""
import json, os, sys
os.environ.setdefault("TPU_ACCELERATOR_TYPE", "v5litepod-4")
import jax
from jax.experimental import topologies

SLICES = ["v4:2x2x2", "v4:4x4x4", "v5p:2x2x1", "v5p:4x4x4", "v5p:4x4x8",
          "v5e:2x2", "v5e:2x4", "v5e:4x4", "v5e:16x16", "v6e:4x4", "v6e:8x8"]
here = os.path.dirname(os.path.abspath(__file__))
try:
    import libtpu
    libtpu_version = getattr(libtpu, "__version__", "?")
except ImportError:
    libtpu_version = "?"
for name in SLICES:
    topo = topologies.get_topology_desc(platform="tpu", topology_name=name)
    devs = sorted(topo.devices, key=lambda d: d.id)
    out = {"topology": name, "device_kind": devs[0].device_kind,
           "jax": jax.__version__, "libtpu": libtpu_version,
           "devices": [[d.id, list(d.coords), d.core_on_chip] for d in devs]}
    path = os.path.join(here, name.replace(":", "_") + ".json")
    with open(path, "w") as f:
        f.write("{\n")
        for k in ("topology", "device_kind", "jax", "libtpu"):
            f.write(f'  "{k}": {json.dumps(out[k])},\n')
        f.write('  "devices": [\n')
        rows = [f"    {json.dumps(r)}" for r in out["devices"]]
        f.write(",\n".join(rows) + "\n  ]\n}\n")
    print(path, len(devs))
