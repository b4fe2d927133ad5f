"""Host callbacks through the PJRT plugin (issue 34): jax.debug.print, pure_callback and
io_callback run on tpusim and give what they give on XLA:CPU — the same printed lines (once
for a sharded jit, once per device in shard_map), the same values, ordered calls in order,
a raising callback's message — on both backends; without JAX's CPU device, debug.print still
runs and pure_callback says what to add. Skips without jax or the built plugin."""
import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("jax")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(ROOT, "python"))
from jax_plugins import tpusim as plugin  # noqa: E402

pytestmark = pytest.mark.skipif(not os.path.exists(plugin.library_path()),
                                reason="the PJRT plugin is not built (%s)" % plugin.library_path())


def run(platforms, *args, code=None, **env):
    e = dict(os.environ, JAX_PLATFORMS=platforms, TPUSIM_TOPOLOGY="2x2",
             XLA_FLAGS="--xla_force_host_platform_device_count=4")
    e["PYTHONPATH"] = os.path.join(ROOT, "python") + os.pathsep + e.get("PYTHONPATH", "")
    e.update(env)
    cmd = [sys.executable, "-c", code] if code else [sys.executable, os.path.join(HERE, "pjrt_callback_cases.py")]
    p = subprocess.run(cmd + list(args), env=e, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stdout + p.stderr
    return p.stdout


@pytest.fixture(scope="module")
def on_cpu():
    return json.loads(run("cpu"))


@pytest.mark.parametrize("backend", ["tpu", "ref"])
def test_callbacks_as_on_xla_cpu(on_cpu, backend):
    got = json.loads(run("tpusim,cpu", TPUSIM_BACKEND=backend))
    assert set(got) == set(on_cpu)
    for k in on_cpu:
        assert got[k] == on_cpu[k], (k, got[k], on_cpu[k])
    # what the cases check is there at all: one line for a sharded jit, four in shard_map
    assert len(got["sharded"]["lines"]) == 1 and len(got["shard_map_print"]["lines"]) == 4
    assert [c[0] for c in got["io_callback_loop"]["calls"]] == [0, 1, 2, 3]
    assert got["raises"] is True


def test_without_the_cpu_device():
    code = """
import numpy as np, jax, jax.numpy as jnp
f = jax.jit(lambda x: (jax.debug.print("v={v}", v=x.sum()), x + 1)[1])
print(np.asarray(f(jnp.arange(3.0))).tolist(), flush=True)
try:
    jax.jit(lambda x: jax.pure_callback(np.sin, jax.ShapeDtypeStruct(x.shape, x.dtype), x))(jnp.ones(2)).block_until_ready()
    print("no error")
except Exception as e:
    print("cpu" in str(e) and "JAX_PLATFORMS" in str(e))
"""
    out = run("tpusim", code=code, TPUSIM_TOPOLOGY="")
    assert out.split() == ["v=3.0", "[1.0,", "2.0,", "3.0]", "True"], out
