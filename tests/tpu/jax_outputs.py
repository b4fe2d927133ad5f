#!/usr/bin/env python3
"""jax_outputs.py: the independent values of tests/tpu/cases. Runs each case's prog.hlo (JAX's
lowered program; a sharded one as its global, one-device program) on XLA's CPU backend (jax
0.10.2) with the case's inputs and writes outK.npy per result leaf (bf16 as float32); then
times nothing, but measures how far tpusim's values of the compiled program (tpu.hlo on the
TPU backend at each op's precision, as test_tpu_compiled and tests/cli/tpu_pod.sh run it) are
from them and writes jax.json: per output the largest |tpusim - JAX| seen and the tolerance
the tests use, 3x that (at least 1e-7 of the output's largest magnitude).

    JAX_PLATFORMS=cpu python3 tests/tpu/jax_outputs.py [--tpusim build/tpusim] [NAME...]

Needs jax (CPU) and numpy; the TPU compiler is not needed (tpu.hlo is committed)."""
import argparse, glob, json, math, os, subprocess, sys, tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
CASES = os.path.join(HERE, "cases")


def xla_cpu(hlo_text, inputs):
    """The results of HLO text on XLA's CPU backend (a flat list of numpy arrays)."""
    import jax
    from jax._src.lib import hlo as xhlo, xla_client as xc
    proto = xhlo.hlo_module_from_text(hlo_text).as_serialized_hlo_module_proto()
    shapes = xhlo.XlaComputation(proto).program_shape().parameter_shapes()
    cpu = jax.devices("cpu")[0]
    exe = cpu.client.compile_and_load(xc._xla.mlir.hlo_to_stablehlo(proto), xc.DeviceList((cpu,)),
                                      xc.CompileOptions())
    args = [jax.device_put(np.asarray(a).astype(s.element_type()), cpu) for a, s in zip(inputs, shapes)]
    return [np.asarray(r) for r in jax.tree_util.tree_leaves(exe.execute(args))]


def by_index(paths, prefix):
    return sorted(paths, key=lambda f: int(os.path.basename(f)[len(prefix):-4]))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tpusim", default=os.path.join(os.path.dirname(os.path.dirname(HERE)), "build", "tpusim"))
    ap.add_argument("names", nargs="*")
    a = ap.parse_args()
    for d in sorted(glob.glob(os.path.join(CASES, "*", ""))):
        name = os.path.basename(d.rstrip("/"))
        if a.names and name not in a.names:
            continue
        meta = json.load(open(os.path.join(d, "meta.json")))
        ins = by_index(glob.glob(os.path.join(d, "in*.npy")), "in")
        outs = xla_cpu(open(os.path.join(d, "prog.hlo")).read(), [np.load(f) for f in ins])
        for f in glob.glob(os.path.join(d, "out*.npy")):
            os.unlink(f)
        for k, o in enumerate(outs):
            np.save(os.path.join(d, f"out{k}.npy"), o.astype(np.float32) if o.dtype.name in ("bfloat16", "float16") else o)
        rec = {"source": "prog.hlo on XLA's CPU backend (jax %s), tests/tpu/jax_outputs.py" % __import__("jax").__version__,
               "outputs": []}
        if "tpu_custom_call" in json.dumps(meta.get("custom_calls", [])):
            rec["note"] = "a Pallas kernel: tpusim refuses tpu.hlo, so no tolerance"
        else:
            with tempfile.TemporaryDirectory() as t:
                cmd = [a.tpusim, "run", os.path.join(d, "tpu.hlo"), "-o", t, "-q"]
                for f in ins:
                    cmd += ["-i", f]
                for s in meta.get("out_shardings", []):
                    cmd += ["--out-sharding", s]
                subprocess.run(cmd, check=True)
                for k, w in enumerate(outs):
                    g = np.load(os.path.join(t, f"{k}.npy"))
                    w = w.astype(np.float64) if w.dtype.kind == "f" or w.dtype.name == "bfloat16" else w
                    err = float(np.abs(g.astype(np.float64) - w).max()) if w.size else 0.0
                    big = float(np.abs(w).max()) if w.size else 0.0
                    tol = max(3 * err, 1e-7 * big)
                    tol = float("%.2g" % tol) if tol > 0 else 0.0
                    if tol < max(3 * err, 1e-7 * big):  # rounding down
                        tol = float("%.2g" % (tol * 1.05))
                    rec["outputs"].append({"max_abs": big, "measured_err": err, "atol": tol})
        with open(os.path.join(d, "jax.json"), "w") as fh:
            json.dump(rec, fh, indent=1)
            fh.write("\n")
        print(name, [(o["measured_err"], o["atol"]) for o in rec["outputs"]], flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
