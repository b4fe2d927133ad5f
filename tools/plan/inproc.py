"""inproc.py: the planner's candidates timed inside this process through libtpusim (ctypes,
standard library only), instead of one `tpusim run` process per program. The library keeps
each chip's preset and its compiled programs between calls (src/api/cache.c), and a
program's text is parsed, compiled and timed without writing it to a file.

Lib(path).time(text, chip_spec) gives what `tpusim run --mode timing --report` writes (the
report as a dict, with "hbm_peak_bytes" added) or raises Failure with the one-line message
the CLI prints. find(tpusim) locates libtpusim.so: $TPUSIM_LIBRARY, else beside the tpusim
binary (build/libtpusim.so) or in the installed package; None when there is none (the
planner then runs processes, as before).
"""
import ctypes
import json
import os
import tempfile
import threading

_MAX_RANK = 16


class _Diag(ctypes.Structure):
    _fields_ = [("status", ctypes.c_int), ("file", ctypes.c_char * 256), ("line", ctypes.c_int), ("col", ctypes.c_int),
                ("src_file", ctypes.c_char_p), ("src_line", ctypes.c_int), ("msg", ctypes.c_char * 768)]


class _Options(ctypes.Structure):  # ORDER: tpu_sim_options in include/tpusim/tpusim.h
    _fields_ = [("backend", ctypes.c_char_p), ("chip", ctypes.c_char_p), ("precision", ctypes.c_char_p),
                ("mode", ctypes.c_char_p), ("out_shardings", ctypes.POINTER(ctypes.c_char_p)),
                ("n_out_shardings", ctypes.c_int), ("mesh", ctypes.c_char_p), ("topology", ctypes.c_char_p),
                ("slices", ctypes.c_int), ("no_windowed_einsum", ctypes.c_int), ("no_events", ctypes.c_int)]


class Failure(Exception):
    """A run that failed: `status` (the tpu_status code) and the CLI's one-line message."""

    def __init__(self, status, msg):
        super().__init__(msg)
        self.status = status


def find(tpusim):
    """The libtpusim.so to use with this tpusim binary, or None."""
    env = os.environ.get("TPUSIM_LIBRARY")
    if env:
        return env if os.path.exists(env) else None
    cands = []
    exe = tpusim if os.path.sep in tpusim else None
    if exe is None:
        import shutil

        exe = shutil.which(tpusim)
    if exe:
        d = os.path.dirname(os.path.realpath(exe))
        cands += [os.path.join(d, "libtpusim.so"), os.path.join(d, "..", "lib", "libtpusim.so")]
    for c in cands:
        if os.path.exists(c):
            return c
    return None


class Lib:
    """libtpusim, loaded once. Calls are made one at a time (the library's calls are not
    thread-safe); its cache makes a program timed twice cost one compile."""

    def __init__(self, path):
        L = ctypes.CDLL(path)
        vp, P = ctypes.c_void_p, ctypes.POINTER
        for name, res, args in [
            ("tpu_sim_load_text", ctypes.c_int, [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t, P(vp), P(_Diag)]),
            ("tpu_sim_module_free", None, [vp]),
            ("tpu_sim_options_init", None, [P(_Options)]),
            ("tpu_sim_run", ctypes.c_int, [vp, P(_Options), vp, ctypes.c_int, P(vp), P(_Diag)]),
            ("tpu_sim_result_free", None, [vp]),
            ("tpu_sim_result_write_json", ctypes.c_int, [vp, ctypes.c_char_p, P(_Diag)]),
            ("tpu_sim_result_hbm_peak", ctypes.c_int64, [vp]),
            ("tpu_diag_format", None, [P(_Diag), ctypes.c_char_p, ctypes.c_size_t]),
        ]:
            f = getattr(L, name)
            f.restype, f.argtypes = res, args
        self.L = L
        self.lock = threading.Lock()
        self.dir = tempfile.mkdtemp(prefix="tpusim-plan-lib-")

    def _fail(self, st, d):
        buf = ctypes.create_string_buffer(2048)
        self.L.tpu_diag_format(ctypes.byref(d), buf, len(buf))
        return Failure(st, buf.value.decode(errors="replace"))

    def time(self, text, chip, name="candidate.hlo", slices=1, topology=None):
        """The timing-mode report of HLO `text` on `chip` (a preset name or chip JSON path),
        over `slices` slices joined by DCN, on the slice shape `topology` (None: the default)."""
        L = self.L
        data = text.encode()
        with self.lock:
            m, r, d = ctypes.c_void_p(), ctypes.c_void_p(), _Diag()
            st = L.tpu_sim_load_text(name.encode(), data, len(data), ctypes.byref(m), ctypes.byref(d))
            if st != 0:
                raise self._fail(st, d)
            try:
                o = _Options()
                L.tpu_sim_options_init(ctypes.byref(o))
                o.mode = b"timing"
                o.chip = chip.encode()
                o.slices = slices
                if topology:
                    o.topology = topology.encode()
                o.no_events = 1  # the report's step, FLOPs and pod figures only: no trace
                st = L.tpu_sim_run(m, ctypes.byref(o), None, 0, ctypes.byref(r), ctypes.byref(d))
                if st != 0:
                    raise self._fail(st, d)
                path = os.path.join(self.dir, "report.json")
                st = L.tpu_sim_result_write_json(r, path.encode(), ctypes.byref(d))
                if st != 0:
                    raise self._fail(st, d)
                with open(path) as fh:
                    rep = json.load(fh)
                os.remove(path)
                rep["hbm_peak_bytes"] = int(L.tpu_sim_result_hbm_peak(r))
                return rep
            finally:
                L.tpu_sim_result_free(r)
                L.tpu_sim_module_free(m)

    def close(self):
        try:
            os.rmdir(self.dir)
        except OSError:
            pass
