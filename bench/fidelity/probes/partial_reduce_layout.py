#!/usr/bin/env python3
"""partial_reduce_layout.py 'CASES_JSON' GENS [TPUSIM]: where the XLA TPU compiler lays out the
input of lax.approx_max_k (ApproxTopK's PartialReduce kernel) and what it costs, against
tpusim (needs libtpu). CASES_JSON is a list of [B, N, k, dtype]. For each case and generation
prints the entry parameter's layout in the compiled program, the compiler's top-level ops
(name, opcode, layout, estimated_cycles; None where it gives none) and tpusim's kernels
(`tpusim run --mode timing`). Example:
    python3 bench/fidelity/probes/partial_reduce_layout.py '[[256,10000,8,"float32"]]' v5e build/tpusim
"""
import importlib.util, json, os, re, sys
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path = [p for p in sys.path if os.path.abspath(p or ".") != HERE]  # its libtpu.py is not libtpu
os.environ.setdefault("TPU_ACCELERATOR_TYPE", "v5litepod-4")
os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from jax import lax  # noqa: E402
from jax.experimental import topologies  # noqa: E402
from jax.sharding import SingleDeviceSharding  # noqa: E402

TOPO = {"v4": "v4:2x2x1", "v5e": "v5e:2x2", "v5p": "v5p:2x2x1", "v6e": "v6e:2x2"}
_spec = importlib.util.spec_from_file_location("probe_libtpu", os.path.join(HERE, "libtpu.py"))
probe_libtpu = importlib.util.module_from_spec(_spec)  # the probes' helpers (libtpu is also a package name)
_spec.loader.exec_module(probe_libtpu)
tpusim_ops = probe_libtpu.tpusim_ops


def entry_ops(text):
    entry = text[text.rfind("\nENTRY"):]
    out = []
    for line in entry.split("\n"):
        m = re.search(r"%(\S+) = (\S+?) (\w[\w-]*)\(", line)
        if not m or m.group(3) in ("parameter", "constant", "bitcast", "tuple", "get-tuple-element"):
            continue
        c = re.search(r'"estimated_cycles":"(\d+)"', line)
        out.append((m.group(1), m.group(3), m.group(2), int(c.group(1)) if c else None))
    return out



if __name__ == "__main__":
    cases = json.loads(sys.argv[1])
    gens = sys.argv[2].split(",")
    tpusim = sys.argv[3] if len(sys.argv) > 3 else "build/tpusim"
    for b, n, k, dt in cases:
        for g in gens:
            dev = topologies.get_topology_desc(platform="tpu", topology_name=TOPO[g]).devices[0]
            arg = jax.ShapeDtypeStruct((b, n), getattr(jnp, dt), sharding=SingleDeviceSharding(dev))
            low = jax.jit(lambda x, k=k: lax.approx_max_k(x, k)).lower(arg)
            hlo = low.compiler_ir("hlo").as_hlo_text()  # lowered for the TPU: PartialReduce
            text = low.compile().as_text()
            param = re.search(r"= (\S+\[%d,%d\]\{[^}]*\}) parameter\(0\)" % (b, n), text[text.rfind("\nENTRY"):])
            print(json.dumps({"case": [b, n, k, dt], "gen": g, "param": param.group(1) if param else None,
                              "compiler": entry_ops(text), "tpusim": tpusim_ops(tpusim, hlo, g)}))
            sys.stdout.flush()
