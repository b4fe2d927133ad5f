"""Shared fixtures: the repository's examples, and the CLI to compare with (when built)."""
import os
import shutil

import pytest

# Before jax is imported: the CPU backend, with 8 host devices for the sharded-jit tests.
os.environ.setdefault("JAX_PLATFORMS", "cpu")
if "xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8").strip()

np = pytest.importorskip("numpy")

REPO = os.environ.get("TPU_SRC") or os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EX = os.path.join(REPO, "examples")


@pytest.fixture
def mlp_inputs():
    return [np.load(os.path.join(EX, f"mlp.in{i}.npy")) for i in range(5)]


@pytest.fixture
def cli():
    """The tpusim CLI from the same build ($TPUSIM_CLI, as ctest sets it), or skip."""
    path = os.environ.get("TPUSIM_CLI") or shutil.which("tpusim")
    if not path or not os.path.exists(path):
        pytest.skip("no tpusim CLI to compare with (set TPUSIM_CLI)")
    return path
