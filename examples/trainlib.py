"""Shared by examples/train_mlp_digits.py and examples/train_lm.py: one training loop on
tpusim (parameters kept in tpusim between steps) and on JAX's CPU backend, the simulated
time to a target loss, a table and a plot of the loss curves."""
import os
import time

os.environ.setdefault("JAX_PLATFORMS", "cpu")  # JAX's own curve is computed on the CPU

import numpy as np


def smooth(losses, k=10):
    """Running mean over the last k steps (a noisy mini-batch loss made readable)."""
    x = np.asarray(losses, np.float64)
    c = np.concatenate([[0.0], np.cumsum(x)])
    i = np.arange(1, len(x) + 1)
    lo = np.maximum(0, i - k)
    return (c[i] - c[lo]) / (i - lo)


def train_tpusim(train_step, state, batches, chip, steps, donate_argnums=0, log_every=0, name=""):
    """Runs `steps` steps of train_step(state, *batch) -> (state, loss) on tpusim's `chip`.
    The state lives in tpusim from step to step (tpusim.jit, donated); only the scalar loss
    is copied out for the curve. Returns dict(losses, clock (simulated seconds after each
    step), wall_s, report (the last step's), state)."""
    import tpusim

    step = tpusim.jit(train_step, chip=chip, donate_argnums=donate_argnums)
    state = tpusim.device_put(state)
    losses, clock = [], []
    t0, c0 = time.perf_counter(), time.process_time()
    for i in range(steps):
        state, loss = step(state, *batches(i))
        losses.append(float(loss))
        clock.append(step.clock.seconds)
        if log_every and (i % log_every == 0 or i == steps - 1):
            print(f"  {name} tpusim {chip} step {i:4d}: loss {losses[-1]:.4f}  simulated {clock[-1] * 1e3:.3f} ms",
                  flush=True)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    return {"losses": np.array(losses), "clock": np.array(clock), "wall_s": wall, "cpu_s": cpu,
            "report": step.last_report, "state": state}


def train_jax(train_step, state, batches, steps, log_every=0, name=""):
    """The same loop with jax.jit on JAX's CPU backend (f32)."""
    import jax

    step = jax.jit(train_step)
    losses = []
    t0, c0 = time.perf_counter(), time.process_time()
    for i in range(steps):
        state, loss = step(state, *batches(i))
        losses.append(float(loss))
        if log_every and (i % log_every == 0 or i == steps - 1):
            print(f"  {name} JAX CPU step {i:4d}: loss {losses[-1]:.4f}", flush=True)
    return {"losses": np.array(losses), "wall_s": time.perf_counter() - t0, "cpu_s": time.process_time() - c0,
            "state": state}


def first_below(losses, target, k=10):
    """The first step whose k-step running mean of the loss is <= target, or None."""
    s = smooth(losses, k)
    hit = np.nonzero(s <= target)[0]
    return int(hit[0]) if len(hit) else None


def summary(runs, jax_run, target, k=10):
    """Prints the table and returns rows: per chip the final loss (mean of the last k steps),
    the step and simulated time at which the running mean reaches `target`, the step time,
    MFU, and the wall-clock and CPU time per step of the simulation on this host."""
    rows = []
    print(f"\n{'run':<12} {'final loss':>10} {'steps to':>9} {'simulated time':>15} {'step time':>11} {'MFU':>6} "
          f"{'wall/step':>10} {'CPU/step':>9}")
    print(f"{'':<12} {'(last ' + str(k) + ')':>10} {'target':>9} {'to target':>15} {'(simulated)':>11} {'':>6} "
          f"{'(host)':>10} {'(host)':>9}")
    for chip, r in runs.items():
        hit = first_below(r["losses"], target, k)
        rep = r["report"]
        row = {"run": f"tpusim {chip}", "final": float(np.mean(r["losses"][-k:])), "steps_to_target": hit,
               "time_to_target_s": float(r["clock"][hit]) if hit is not None else None,
               "step_s": rep.step_time_s, "mfu": rep.mfu, "wall_per_step_s": r["wall_s"] / len(r["losses"]),
               "cpu_per_step_s": r["cpu_s"] / len(r["losses"])}
        rows.append(row)
        t = f"{row['time_to_target_s'] * 1e3:.3f} ms" if hit is not None else "not reached"
        print(f"{row['run']:<12} {row['final']:>10.4f} {str(hit if hit is not None else '-'):>9} {t:>15} "
              f"{rep.step_time_s * 1e6:>8.1f} us {rep.mfu * 100:>5.1f}% {row['wall_per_step_s']:>8.3f} s "
              f"{row['cpu_per_step_s']:>7.3f} s")
    hit = first_below(jax_run["losses"], target, k)
    row = {"run": "JAX CPU", "final": float(np.mean(jax_run["losses"][-k:])), "steps_to_target": hit,
           "wall_per_step_s": jax_run["wall_s"] / len(jax_run["losses"]),
           "cpu_per_step_s": jax_run["cpu_s"] / len(jax_run["losses"])}
    rows.append(row)
    print(f"{row['run']:<12} {row['final']:>10.4f} {str(hit if hit is not None else '-'):>9} {'':>15} {'':>11} "
          f"{'':>6} {row['wall_per_step_s']:>8.3f} s {row['cpu_per_step_s']:>7.3f} s")
    for chip, r in runs.items():
        gap = np.abs(r["losses"] - jax_run["losses"][:len(r["losses"])])
        print(f"tpusim {chip} - JAX CPU, per-step loss: largest |difference| {gap.max():.2e}, mean {gap.mean():.2e}")
    return rows


def plot(path, title, runs, jax_run, target, k=10):
    """Two panels: loss against step (tpusim bf16 numerics vs JAX CPU f32), and loss against
    simulated time (v5e vs v5p). Writes a PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a, c, b) = plt.subplots(1, 3, figsize=(16, 4))
    steps = np.arange(len(jax_run["losses"]))
    a.plot(steps, jax_run["losses"], color="0.75", lw=0.8, label="JAX CPU, each step")
    a.plot(steps, smooth(jax_run["losses"], k), color="k", label="JAX CPU (XLA CPU numerics)")
    colors = {"v5e": "tab:blue", "v5p": "tab:red"}
    for chip, r in runs.items():
        a.plot(steps[:len(r["losses"])], smooth(r["losses"], k), color=colors.get(chip), ls="--",
               label=f"tpusim {chip} (bf16 MXU passes)")
        b.plot(r["clock"] * 1e3, smooth(r["losses"], k), color=colors.get(chip), label=f"tpusim {chip}")
        hit = first_below(r["losses"], target, k)
        if hit is not None:
            b.plot([r["clock"][hit] * 1e3], [smooth(r["losses"], k)[hit]], "o", color=colors.get(chip))
        c.plot(steps[:len(r["losses"])], r["losses"] - jax_run["losses"][:len(r["losses"])], color=colors.get(chip),
               lw=0.8, label=f"tpusim {chip} - JAX CPU")
    for ax in (a, b):
        ax.axhline(target, color="0.5", lw=0.8, ls=":")
        ax.set_ylabel(f"training loss ({k}-step mean)")
        ax.legend()
    a.set_xlabel("step")
    a.set_title(f"{title}: TPU numerics vs JAX CPU")
    c.axhline(0, color="0.5", lw=0.8)
    c.set_xlabel("step")
    c.set_ylabel("loss difference (per step)")
    c.set_title("tpusim (bf16 MXU) minus JAX CPU")
    c.legend()
    b.set_xlabel("simulated time on the chip (ms)")
    b.set_title(f"time to loss {target} (dot: first reached)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    print(f"wrote {path}")
