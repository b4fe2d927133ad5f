# %% [markdown]
# # tpusim in a notebook: a training loop on a simulated TPU
#
# A notebook in percent format: each `# %%` starts a cell (VS Code, PyCharm, Spyder and
# Jupyter with jupytext open it as a notebook); `python3 examples/notebook.py` runs it top to
# bottom, and the Python tests do that on every change (`TPUSIM_NOTEBOOK_STEPS` sets the
# number of training steps; 60 by default).
#
# It shows: a JAX function on a simulated v5e; a training loop whose parameters stay in
# tpusim between steps (`tpusim.jit`, `tpusim.Array`, donation, the simulated clock); TPU
# numerics against JAX on the CPU; and the same step timed on v5p.

# %%
import os

os.environ.setdefault("JAX_PLATFORMS", "cpu")
import jax
import jax.numpy as jnp
import numpy as np

import tpusim

STEPS = int(os.environ.get("TPUSIM_NOTEBOOK_STEPS", "60"))
print("tpusim", tpusim.version(), "| jax", jax.__version__)

# %% [markdown]
# ## 1. One call: a JAX function on a simulated chip
# `tpusim.simulate` lowers the function as `jax.jit` would, compiles it for the chip and
# returns the values (TPU numerics) and a report of where the time went.

# %%
rng = np.random.default_rng(0)
x = rng.standard_normal((256, 512), dtype=np.float32)
w = rng.standard_normal((512, 1024), dtype=np.float32) / 16
out, report = tpusim.simulate(lambda x, w: jax.nn.relu(x @ w), x, w, chip="v5e")
print(report.summary())
print("max |tpusim - JAX CPU| =", float(np.max(np.abs(out - jax.nn.relu(x @ w)))), "(one bf16 MXU pass per f32 dot)")

# %% [markdown]
# ## 2. A training loop with the parameters kept in tpusim
# A linear-softmax classifier on synthetic data, trained with a seed-style step:
# `jax.value_and_grad`, then `jax.tree_util.tree_map` for SGD. `tpusim.jit` lowers it
# once; `donate_argnums=0` gives the old parameters up to each step, as in JAX, so each
# step's outputs are the next step's inputs without a copy through NumPy.

# %%
n_in, n_cls = 32, 4
true_w = rng.standard_normal((n_in, n_cls)).astype(np.float32)
data_x = rng.standard_normal((1024, n_in)).astype(np.float32)
data_y = np.argmax(data_x @ true_w, axis=1).astype(np.int32)


def loss_fn(params, x, y):
    logits = x @ params["w"] + params["b"]
    return -jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(logits), y[:, None], axis=1))


def train_step(params, x, y):
    loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
    return jax.tree_util.tree_map(lambda p, g: p - 0.5 * g, params, grads), loss


params0 = {"w": np.zeros((n_in, n_cls), np.float32), "b": np.zeros(n_cls, np.float32)}
step = tpusim.jit(train_step, chip="v5e", donate_argnums=0)
params = tpusim.device_put(params0)
losses = []
for i in range(STEPS):
    batch = slice((i * 128) % 1024, (i * 128) % 1024 + 128)
    params, loss = step(params, data_x[batch], data_y[batch])
    losses.append(float(loss))
print(f"loss {losses[0]:.3f} -> {losses[-1]:.3f} in {STEPS} steps; {step.clock}")
print("parameters are", type(params["w"]).__name__, params["w"].shape, params["w"].hlo_dtype)

# %% [markdown]
# ## 3. TPU numerics against JAX on the CPU
# The same steps with `jax.jit` on the CPU (f32 dots). tpusim's dots take one bf16 pass
# on the MXU with f32 accumulation (`precision=None` keeps each dot's precision: DEFAULT),
# so the curves agree closely but not bit for bit.

# %%
pj, losses_cpu = params0, []
for i in range(STEPS):
    batch = slice((i * 128) % 1024, (i * 128) % 1024 + 128)
    pj, lj = jax.jit(train_step)(pj, data_x[batch], data_y[batch])
    losses_cpu.append(float(lj))
gap = max(abs(a - b) for a, b in zip(losses, losses_cpu))
print(f"final loss tpusim {losses[-1]:.4f}, JAX CPU {losses_cpu[-1]:.4f}; largest gap over the run {gap:.2e}")
assert losses[-1] < losses[0] and gap < 0.05

# %% [markdown]
# ## 4. The step on v5e and v5p
# `step.last_report` is the last step's report; the same step on v5p for comparison.

# %%
rep_e = step.last_report
step_p = tpusim.jit(train_step, chip="v5p")
step_p(params, data_x[:128], data_y[:128])
rep_p = step_p.last_report
for r in (rep_e, rep_p):
    print(f"{r.chip}: step {r.step_time_s * 1e6:.2f} us, MFU {r.mfu * 100:.2f} %, "
          f"HBM {r.hbm_bytes / 1e3:.1f} kB, breakdown " + ", ".join(f"{k} {v:.2f}" for k, v in r.breakdown.items()))
print("largest ops on v5e:")
for op in rep_e.ops[:3]:
    print(f"  {op['name']:<16} {op['kind']:<16} {op['cycles']:>6} cycles  {op['op_name']}")

# %% [markdown]
# ## 5. Plot (when matplotlib is installed)

# %%
try:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
except ImportError:
    plt = None
if plt is not None:
    fig, ax = plt.subplots(figsize=(5, 3))
    ax.plot(losses_cpu, label="JAX CPU (f32)")
    ax.plot(losses, "--", label="tpusim v5e (bf16 MXU)")
    ax.set_xlabel("step")
    ax.set_ylabel("loss")
    ax.legend()
    plt.close(fig)  # in Jupyter: display(fig)
