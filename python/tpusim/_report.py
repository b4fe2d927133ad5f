"""A timed run's report: metrics, the step's breakdown, the per-op profile, files and plots."""
import ctypes
import html
import json
import os
import tempfile

from . import _lib

_OP_FIELDS = ["name", "kind", "count", "cycles", "time_s", "frac", "flops", "padded_flops", "hbm_bytes", "ai",
              "flops_per_s", "padding_waste", "memory_bound", "op_name", "source", "function"]
_NUM_FIELDS = _OP_FIELDS[2:13]


class Report:
    """What the simulated chip spent on one step (one chip of the pod for a module of
    several devices).

    Attributes: chip, devices, cycles, clock_hz, step_time_s, flops, padded_flops,
    padding_waste, flops_per_s, peak_flops_per_s, peak_kind, mfu (0..1), hbm_bytes,
    hbm_bw, hbm_bw_used, ai (FLOP/B), ridge_ai, attainable, roofline_frac, memory_bound,
    ici_bytes; breakdown: {part: fraction of the step} (mxu_busy, vector_busy, hbm_wait,
    ici_wait, idle: an exclusive split summing to 1); breakdown_cycles; unit_util: {unit:
    busy fraction} (units overlap); ops: the per-op profile, one dict per op, largest
    first (name, kind, count, cycles, time_s, frac, flops, padded_flops, hbm_bytes, ai,
    flops_per_s, padding_waste, memory_bound, and where it came from: op_name ("jit(f)/
    dot_general"), source ("model.py:42") and function, None when the HLO has no metadata).
    """

    def __init__(self, result, program):
        self._result = result  # keeps the C result for save_json / save_trace
        self.program = program
        self._loaded = False

    def __getattr__(self, name):
        # The metrics and the per-op profile are read from the result on first use: a
        # training loop that never looks at the report does not pay for it.
        if name.startswith("_") or self.__dict__.get("_loaded", True):
            raise AttributeError(name)
        self._load()
        return getattr(self, name)

    def _load(self):
        self._loaded = True
        L = _lib.lib()
        result = self._result
        m = _lib.Metrics()
        d = _lib.Diag()
        _lib.check(L.tpu_sim_result_metrics(result._h, ctypes.byref(m), ctypes.byref(d)), d)
        self.chip = m.chip.decode()
        self.devices = m.devices
        self.cycles = m.cycles
        self.clock_hz = m.clock_hz
        self.step_time_s = m.step_s
        self.flops = m.flops
        self.padded_flops = m.padded_flops
        self.padding_waste = m.padding_waste
        self.flops_per_s = m.flops_per_s
        self.peak_flops_per_s = m.peak_flops_per_s
        self.peak_kind = m.peak_kind.decode()
        self.mfu = m.mfu
        self.hbm_bytes = m.hbm_bytes
        self.hbm_bw = m.hbm_bw
        self.hbm_bw_used = m.hbm_bw_used
        self.ai = m.ai
        self.ridge_ai = m.ridge_ai
        self.attainable = m.attainable
        self.roofline_frac = m.roofline_frac
        self.memory_bound = bool(m.memory_bound)
        self.ici_bytes = m.ici_bytes
        self.breakdown = {m.part_name[k].decode(): m.part_frac[k] for k in range(m.nparts)}
        self.breakdown_cycles = {m.part_name[k].decode(): m.part_cycles[k] for k in range(m.nparts)}
        self.breakdown_from_events = bool(m.parts_from_events)
        self.unit_util = {m.unit_name[k].decode(): m.unit_util[k] for k in range(m.nunits)}
        self.ops = []
        for i in range(L.tpu_sim_result_nops(result._h)):
            o = _lib.Op()
            d = _lib.Diag()
            _lib.check(L.tpu_sim_result_op(result._h, i, ctypes.byref(o), ctypes.byref(d)), d)
            row = {"name": o.name.decode(), "kind": o.kind.decode()}
            row.update({f: getattr(o, f) for f in _NUM_FIELDS})
            row["memory_bound"] = bool(o.memory_bound)
            # where it came from (HLO metadata): "jit(step)/dot_general", "model.py:42", "step"
            row["op_name"] = o.op_name.decode("utf-8", "replace") if o.op_name else None
            src = o.source_file.decode("utf-8", "replace") if o.source_file else None
            row["source"] = f"{src}:{o.source_line}" if src and o.source_line > 0 else src
            row["function"] = o.function.decode("utf-8", "replace") if o.function else None
            self.ops.append(row)

    # ---- data ----

    def to_pandas(self):
        """The per-op profile as a pandas DataFrame (needs pandas)."""
        import pandas as pd

        return pd.DataFrame(self.ops, columns=_OP_FIELDS)

    def to_dict(self):
        """The JSON report (as save_json writes it) as a dict."""
        with tempfile.TemporaryDirectory() as t:
            p = os.path.join(t, "report.json")
            self.save_json(p)
            with open(p) as f:
                return json.load(f)

    def save_json(self, path):
        """Writes the JSON report (the same as `tpusim run --report`)."""
        d = _lib.Diag()
        with _lib.LOCK:
            st = _lib.lib().tpu_sim_result_write_json(self._result._h, os.fspath(path).encode(), ctypes.byref(d))
        _lib.check(st, d)

    def save_trace(self, path):
        """Writes the unit timeline in the Chrome trace format (open it in ui.perfetto.dev
        or chrome://tracing); the same as `tpusim run --trace`."""
        d = _lib.Diag()
        with _lib.LOCK:
            st = _lib.lib().tpu_sim_result_write_trace(self._result._h, os.fspath(path).encode(), ctypes.byref(d))
        _lib.check(st, d)

    # ---- display ----

    def summary(self):
        bd = ", ".join(f"{k} {v * 100:.1f}%" for k, v in self.breakdown.items())
        return (f"{self.chip}: step {self.step_time_s * 1e6:.3f} us ({self.cycles} cycles), "
                f"{self.flops:.4g} FLOPs, MFU {self.mfu * 100:.2f}%, HBM {self.hbm_bytes:.4g} B, "
                f"{'memory' if self.memory_bound else 'compute'}-bound; {bd}")

    def __repr__(self):
        return f"<tpusim.Report {self.summary()}>"

    def _repr_html_(self, top=10):
        e = html.escape
        rows = [("chip", self.chip + (f" x {self.devices} devices" if self.devices > 1 else "")),
                ("step time", f"{self.step_time_s * 1e6:.3f} us ({self.cycles:,} cycles at {self.clock_hz / 1e9:.3g} GHz)"),
                ("FLOPs", f"{self.flops:.4g} ({self.flops_per_s / 1e12:.4g} TFLOP/s)"),
                ("MFU", f"{self.mfu * 100:.2f} % of {self.peak_flops_per_s / 1e12:.4g} T ({self.peak_kind})"),
                ("HBM", f"{self.hbm_bytes:.4g} B ({self.hbm_bw_used / 1e9:.4g} of {self.hbm_bw / 1e9:.4g} GB/s)"),
                ("roofline", f"AI {self.ai:.3g} FLOP/B (ridge {self.ridge_ai:.3g}), "
                             f"{'memory' if self.memory_bound else 'compute'}-bound, "
                             f"{self.roofline_frac * 100:.1f} % of attainable")]
        colors = {"mxu_busy": "#4c72b0", "vector_busy": "#55a868", "hbm_wait": "#c44e52", "ici_wait": "#8172b2",
                  "idle": "#cccccc"}
        bar = "".join(
            f'<div title="{e(k)} {v * 100:.1f}%" style="width:{v * 100:.3f}%;background:{colors.get(k, "#999")}"></div>'
            for k, v in self.breakdown.items() if v > 0)
        legend = " ".join(
            f'<span style="color:{colors.get(k, "#999")}">&#9632;</span> {e(k)} {v * 100:.1f}%'
            for k, v in self.breakdown.items())
        out = ['<div class="tpusim-report"><table>']
        out += [f"<tr><th style='text-align:left'>{e(k)}</th><td style='text-align:left'>{e(v)}</td></tr>"
                for k, v in rows]
        out.append("</table>")
        out.append(f'<div style="display:flex;height:14px;width:480px;border:1px solid #888">{bar}</div>')
        out.append(f"<div>{legend}</div>")
        cols = ["name", "kind", "count", "time_s", "frac", "flops", "hbm_bytes", "ai", "bound", "source"]
        out.append("<table><tr>" + "".join(f"<th>{c}</th>" for c in cols) + "</tr>")
        for r in self.ops[:top]:
            cells = [e(r["name"]), e(r["kind"]), str(r["count"]), f"{r['time_s'] * 1e6:.3f} us",
                     f"{r['frac'] * 100:.1f} %", f"{r['flops']:.3g}", f"{r['hbm_bytes']:.3g}", f"{r['ai']:.3g}",
                     "memory" if r["memory_bound"] else "compute",
                     e(" at ".join(x for x in (r["op_name"], r["source"]) if x) or "")]
            out.append("<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
        out.append("</table>")
        if len(self.ops) > top:
            out.append(f"<div>... {len(self.ops) - top} more ops (report.ops, report.to_pandas())</div>")
        out.append("</div>")
        return "\n".join(out)

    # ---- plots (matplotlib, imported when called) ----

    def plot_roofline(self, ax=None, ops=True):
        """The chip's roofline (log-log FLOP/s against FLOP/B) with the step and, with ops,
        every op that did FLOPs. Returns the matplotlib Axes."""
        import matplotlib.pyplot as plt
        import numpy as np

        if ax is None:
            _, ax = plt.subplots(figsize=(6, 4))
        pts = [r["ai"] for r in self.ops if r["flops"] > 0 and np.isfinite(r["ai"]) and r["ai"] > 0] if ops else []
        finite_ai = [self.ai] if np.isfinite(self.ai) and self.ai > 0 else []
        lo = min(pts + finite_ai + [self.ridge_ai]) / 10
        hi = max(pts + finite_ai + [self.ridge_ai]) * 10
        x = np.logspace(np.log10(lo), np.log10(hi), 200)
        ax.loglog(x, np.minimum(self.peak_flops_per_s, x * self.hbm_bw), "k-", label=f"{self.chip} roofline")
        ax.axvline(self.ridge_ai, color="gray", ls=":", lw=1)
        if ops:
            rows = [r for r in self.ops if r["flops"] > 0 and np.isfinite(r["ai"]) and r["ai"] > 0 and r["flops_per_s"] > 0]
            if rows:
                ax.scatter([r["ai"] for r in rows], [r["flops_per_s"] for r in rows],
                           s=[20 + 200 * r["frac"] for r in rows], alpha=0.5, label="ops (size: share of step)")
        if finite_ai and self.flops_per_s > 0:
            ax.scatter([self.ai], [self.flops_per_s], marker="*", s=200, color="C3", label="step", zorder=3)
        ax.set_xlabel("arithmetic intensity (FLOP/B)")
        ax.set_ylabel("FLOP/s")
        ax.set_title(f"{self.program} on {self.chip}: MFU {self.mfu * 100:.1f} %")
        ax.legend(loc="lower right", fontsize="small")
        return ax

    def plot_timeline(self, ax=None, max_events=20000):
        """The units' busy intervals over the step (from the Chrome trace), one row per unit
        lane, coloured by op. Returns the matplotlib Axes."""
        import matplotlib.pyplot as plt

        with tempfile.TemporaryDirectory() as t:
            p = os.path.join(t, "trace.json")
            self.save_trace(p)
            with open(p) as f:
                tr = json.load(f)
        evs = tr["traceEvents"] if isinstance(tr, dict) else tr
        names = {}
        for ev in evs:
            if ev.get("ph") == "M" and ev.get("name") == "thread_name":
                names[(ev.get("pid"), ev.get("tid"))] = ev["args"]["name"]
        spans = [ev for ev in evs if ev.get("ph") == "X"][:max_events]
        lanes = sorted({(ev.get("pid"), ev.get("tid")) for ev in spans})
        row = {k: i for i, k in enumerate(lanes)}
        if ax is None:
            _, ax = plt.subplots(figsize=(10, 0.4 * len(lanes) + 1.2))
        cmap = plt.get_cmap("tab20")
        opcolor = {}
        for ev in spans:
            c = opcolor.setdefault(ev.get("name"), cmap(len(opcolor) % 20))
            ax.broken_barh([(ev["ts"], ev["dur"])], (row[(ev.get("pid"), ev.get("tid"))] - 0.4, 0.8), color=c)
        ax.set_yticks(range(len(lanes)))
        ax.set_yticklabels([names.get(k, str(k[1])) for k in lanes])
        ax.invert_yaxis()
        ax.set_xlabel("time (us)")
        ax.set_title(f"{self.program} on {self.chip}: {self.step_time_s * 1e6:.3f} us")
        return ax
