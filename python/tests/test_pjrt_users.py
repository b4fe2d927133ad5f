"""JAX scripts as users write them (issue 34) through the PJRT plugin: the values and the
shardings of every result equal JAX on 4 CPU devices (pjrt_user_cases.py), donation is
honoured, the reference backend runs, and tpusim.simulate partitions a jit that takes a
Python scalar. Skips without jax or without the built plugin."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip("jax")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(ROOT, "python"))
from jax_plugins import tpusim as plugin  # noqa: E402

pytestmark = pytest.mark.skipif(not os.path.exists(plugin.library_path()),
                                reason="the PJRT plugin is not built (%s)" % plugin.library_path())


def run(script_or_code, platform, *args, devices=4, code=False, **env):
    e = dict(os.environ, JAX_PLATFORMS=platform, TPUSIM_TOPOLOGY="2x2", TPUSIM_PRECISION="highest",
             XLA_FLAGS="--xla_force_host_platform_device_count=%d" % devices)
    e["PYTHONPATH"] = os.path.join(ROOT, "python") + os.pathsep + e.get("PYTHONPATH", "")
    e.update(env)
    cmd = [sys.executable, "-c", script_or_code] if code else [sys.executable, os.path.join(HERE, script_or_code)]
    p = subprocess.run(cmd + [str(a) for a in args], env=e, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stdout + p.stderr
    return p.stdout


@pytest.fixture(scope="module")
def cpu_cases(tmp_path_factory):
    out = tmp_path_factory.mktemp("cpu") / "cpu.npz"
    run("pjrt_user_cases.py", "cpu", out)
    return dict(np.load(out))


# TPUSIM_BACKEND=ref: the reference interpreter runs every program too (values only)
@pytest.mark.parametrize("backend", ["tpu", "ref"])
def test_user_programs_values_and_shardings(tmp_path, cpu_cases, backend):
    outs = {"cpu": dict(cpu_cases)}
    run("pjrt_user_cases.py", "tpusim", tmp_path / "tpusim.npz", TPUSIM_BACKEND=backend)
    outs["tpusim"] = dict(np.load(tmp_path / "tpusim.npz"))
    got_sh = json.loads(str(outs["tpusim"].pop("__shardings__")))
    want_sh = json.loads(str(outs["cpu"].pop("__shardings__")))
    assert set(outs["tpusim"]) == set(outs["cpu"])
    for k, want in outs["cpu"].items():
        got = outs["tpusim"][k]
        assert got.dtype == want.dtype and got.shape == want.shape, k
        assert np.abs(got - want).max() <= 1e-3 * max(np.abs(want).max(), 1e-30), (k, np.abs(got - want).max())
        assert got_sh[k] == want_sh[k], (k, got_sh[k], want_sh[k])
    # the FSDP loop's parameters and optimizer state stay sharded by rows after every step
    assert got_sh["fsdp_loop.0"] == "0:0-4,0-8 1:0-4,0-8 2:4-8,0-8 3:4-8,0-8"


def test_simulate_sharded_jit_with_a_python_scalar():
    # JAX names an empty mesh for the scalar beside the 2x2 one: the program runs on 4 chips
    import jax
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

    import tpusim

    mesh = Mesh(np.array(jax.devices()[:4]).reshape(2, 2), ("x", "y"))
    a = np.arange(16, dtype=np.float32).reshape(4, 4)
    xs = jax.device_put(a, NamedSharding(mesh, P("x", "y")))
    out, report = tpusim.simulate(lambda v, t: v * t, xs, 2.0)
    assert report.devices == 4
    np.testing.assert_array_equal(out, a * 2)


def test_license_named_in_the_package():
    text = open(os.path.join(ROOT, "LICENSE")).read()
    assert "Apache License" in text and "Version 2.0, January 2004" in text and "END OF TERMS AND CONDITIONS" in text
    meta = open(os.path.join(ROOT, "python", "pyproject.toml")).read()
    assert 'license = { text = "Apache-2.0" }' in meta
    assert open(os.path.join(ROOT, "python", "LICENSE")).read() == text  # shipped in the wheel


DONATION = r"""
import jax, jax.numpy as jnp, numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
f = jax.jit(lambda a, b: (a * 2 + b, b.sum()), donate_argnums=0)
x, y = jnp.ones((4, 4)), jnp.arange(4.0)
out, s = f(x, y)
mem = f.lower(jnp.ones((4, 4)), y).compile().memory_analysis()
mesh = Mesh(np.array(jax.devices()[:4]).reshape(2, 2), ("x", "y"))
w = jax.device_put(np.ones((8, 4), np.float32), NamedSharding(mesh, P("x", None)))
w2 = jax.jit(lambda v: v - 1, donate_argnums=0)(w)
print(x.is_deleted(), y.is_deleted(), float(out[0, 0]), float(s), mem.alias_size_in_bytes, w.is_deleted(),
      float(w2.sum()))
"""


def test_donation_honoured():
    # as on CPU: the donated array is deleted, the other kept; the executable aliases 64 bytes
    want = "True False 2.0 6.0 64 True 0.0"
    assert run(DONATION, "cpu", code=True).split() == want.split()
    assert run(DONATION, "tpusim", code=True).split()[-7:] == want.split()


def test_simulate_finds_its_library_as_the_plugin_does():
    # no TPUSIM_LIBRARY: the libtpusim.so beside the plugin library (or the package's, or build/)
    lib = os.environ.get("TPUSIM_LIBRARY") or os.path.join(ROOT, "build", "libtpusim.so")
    e = {k: v for k, v in os.environ.items() if k != "TPUSIM_LIBRARY"}
    e["TPUSIM_PJRT_LIBRARY"] = os.path.join(os.path.dirname(lib), "libtpusim_pjrt.so")
    e["PYTHONPATH"] = os.path.join(ROOT, "python") + os.pathsep + e.get("PYTHONPATH", "")
    code = ("import numpy as np, tpusim, tpusim._lib as L\n"
            "out, rep = tpusim.simulate(lambda a: a * 2, np.arange(3.0, dtype=np.float32))\n"
            "print(L._lib_path, out.tolist(), rep.cycles > 0)")
    p = subprocess.run([sys.executable, "-c", code], env=e, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    path, rest = p.stdout.split(" ", 1)
    assert os.path.samefile(path, lib) and rest.split() == ["[0.0,", "2.0,", "4.0]", "True"]


def test_linalg_lowered_as_for_a_tpu(tmp_path):
    # eigh, svd, norm(ord=2), lstsq, pinv, qr: JAX's TPU rules, with the "Qr", "Eigh" and
    # householder-product custom calls expanded in HLO (jax_plugins/tpusim/lowering.py)
    outs = {}
    for platform in ("cpu", "tpusim"):
        run("pjrt_linalg_cases.py", platform, tmp_path / (platform + ".npz"), devices=1,
            TPUSIM_TOPOLOGY="")
        outs[platform] = dict(np.load(tmp_path / (platform + ".npz")))
    assert set(outs["tpusim"]) == set(outs["cpu"])
    for k, want in outs["cpu"].items():
        got = outs["tpusim"][k]
        assert got.shape == want.shape and got.dtype == want.dtype, k
        assert np.abs(got - want).max() <= 1e-3 * np.abs(want).max(), (k, np.abs(got - want).max())


@pytest.mark.parametrize("backend", ["tpu", "ref"])
def test_float8_as_ml_dtypes(tmp_path, backend):
    # f8e4m3fn and f8e5m2: computed as f32 with each f8 result rounded to the f8 grid; every
    # result equals JAX on CPU bit for bit, and the quantization equals ml_dtypes'
    outs = {}
    for platform in ("cpu", "tpusim"):
        run("pjrt_f8_cases.py", platform, tmp_path / (platform + ".npz"), devices=1, TPUSIM_TOPOLOGY="",
            TPUSIM_BACKEND=backend)
        outs[platform] = dict(np.load(tmp_path / (platform + ".npz")))
    for k, want in outs["cpu"].items():
        got = outs["tpusim"][k]
        assert got.dtype == want.dtype and got.shape == want.shape, k
        assert np.array_equal(got, want, equal_nan=want.dtype.kind == "f"), (k, got, want)
    for n in ("float8_e4m3fn", "float8_e5m2"):
        assert np.array_equal(outs["tpusim"][n + ".quant"], outs["tpusim"][n + ".ml_dtypes"])


