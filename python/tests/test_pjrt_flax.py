"""flax + optax training and everyday JAX patterns through the PJRT plugin (issue 34): every
figure of pjrt_flax_cases.py within 1e-3 of the largest magnitude of JAX on XLA:CPU (4 CPU
devices against a 2x2 slice, highest precision). Skips without jax, flax, optax or the plugin."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip("jax")
pytest.importorskip("flax")
pytest.importorskip("optax")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(ROOT, "python"))
from jax_plugins import tpusim as plugin  # noqa: E402

pytestmark = pytest.mark.skipif(not os.path.exists(plugin.library_path()),
                                reason="the PJRT plugin is not built (%s)" % plugin.library_path())


def run(platforms, **env):
    e = dict(os.environ, JAX_PLATFORMS=platforms, TPUSIM_TOPOLOGY="2x2", TPUSIM_PRECISION="highest",
             XLA_FLAGS="--xla_force_host_platform_device_count=4")
    e["PYTHONPATH"] = os.path.join(ROOT, "python") + os.pathsep + e.get("PYTHONPATH", "")
    e.update(env)
    p = subprocess.run([sys.executable, os.path.join(HERE, "pjrt_flax_cases.py")], env=e, capture_output=True,
                       text=True, timeout=900)
    assert p.returncode == 0, p.stdout + p.stderr[-4000:]
    return json.loads(p.stdout)


def test_flax_training_and_patterns_as_on_xla_cpu():
    want, got = run("cpu"), run("tpusim,cpu")
    assert set(got) == set(want) and len(want) >= 11
    for k in want:
        w, g = np.asarray(want[k], float), np.asarray(got[k], float)
        assert w.shape == g.shape, k
        assert np.abs(g - w).max() <= 1e-3 * max(np.abs(w).max(), 1e-30), (k, g, w)
    assert want["flax_losses"][-1] < want["flax_losses"][0]  # the step trains
