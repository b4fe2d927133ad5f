"""ctypes bindings to libtpusim (include/tpusim/tpusim.h): the structs, the calls, errors."""
import ctypes
import os
import threading

MAX_RANK = 16
MAX_PARTS = 8


class TpusimError(Exception):
    """A failed tpusim call. str(e) is the diagnostic as the CLI prints it
    ("model.hlo:3:7: error: ..."); status is the status name ("TPU_ERR_PARSE"), and
    file/line/col locate the input (line 0 when there is no location)."""

    def __init__(self, text, status="TPU_ERR_ARG", file="", line=0, col=0, message=None):
        super().__init__(text)
        self.status = status
        self.file = file
        self.line = line
        self.col = col
        self.message = message if message is not None else text


class Diag(ctypes.Structure):
    _fields_ = [
        ("status", ctypes.c_int),
        ("file", ctypes.c_char * 256),
        ("line", ctypes.c_int),
        ("col", ctypes.c_int),
        ("src_file", ctypes.c_char_p),
        ("src_line", ctypes.c_int),
        ("msg", ctypes.c_char * 768),
    ]


class Array(ctypes.Structure):
    _fields_ = [
        ("dtype", ctypes.c_int),
        ("rank", ctypes.c_int),
        ("dims", ctypes.c_int64 * MAX_RANK),
        ("data", ctypes.c_void_p),
        ("nbytes", ctypes.c_size_t),
    ]


PROGRESS_FN = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64, ctypes.c_int64)


class Options(ctypes.Structure):
    _fields_ = [
        ("backend", ctypes.c_char_p),
        ("chip", ctypes.c_char_p),
        ("precision", ctypes.c_char_p),
        ("mode", ctypes.c_char_p),
        ("out_shardings", ctypes.POINTER(ctypes.c_char_p)),
        ("n_out_shardings", ctypes.c_int),
        ("mesh", ctypes.c_char_p),
        ("topology", ctypes.c_char_p),
        ("slices", ctypes.c_int),
        ("no_windowed_einsum", ctypes.c_int),
        ("no_events", ctypes.c_int),
    ]


class Metrics(ctypes.Structure):
    _fields_ = [
        ("chip", ctypes.c_char * 32),
        ("devices", ctypes.c_int64),
        ("cycles", ctypes.c_int64),
        ("clock_hz", ctypes.c_double),
        ("step_s", ctypes.c_double),
        ("flops", ctypes.c_double),
        ("padded_flops", ctypes.c_double),
        ("padding_waste", ctypes.c_double),
        ("flops_per_s", ctypes.c_double),
        ("peak_flops_per_s", ctypes.c_double),
        ("peak_kind", ctypes.c_char_p),
        ("mfu", ctypes.c_double),
        ("hbm_bytes", ctypes.c_double),
        ("hbm_bw", ctypes.c_double),
        ("hbm_bw_used", ctypes.c_double),
        ("ai", ctypes.c_double),
        ("ridge_ai", ctypes.c_double),
        ("attainable", ctypes.c_double),
        ("roofline_frac", ctypes.c_double),
        ("memory_bound", ctypes.c_int),
        ("ici_bytes", ctypes.c_double),
        ("nparts", ctypes.c_int),
        ("part_name", ctypes.c_char_p * MAX_PARTS),
        ("part_cycles", ctypes.c_int64 * MAX_PARTS),
        ("part_frac", ctypes.c_double * MAX_PARTS),
        ("parts_from_events", ctypes.c_int),
        ("nunits", ctypes.c_int),
        ("unit_name", ctypes.c_char_p * MAX_PARTS),
        ("unit_util", ctypes.c_double * MAX_PARTS),
    ]


class Op(ctypes.Structure):
    _fields_ = [
        ("name", ctypes.c_char_p),
        ("kind", ctypes.c_char_p),
        ("count", ctypes.c_int64),
        ("cycles", ctypes.c_int64),
        ("time_s", ctypes.c_double),
        ("frac", ctypes.c_double),
        ("flops", ctypes.c_double),
        ("padded_flops", ctypes.c_double),
        ("hbm_bytes", ctypes.c_double),
        ("ai", ctypes.c_double),
        ("flops_per_s", ctypes.c_double),
        ("padding_waste", ctypes.c_double),
        ("memory_bound", ctypes.c_int),
        ("op_name", ctypes.c_char_p),
        ("source_file", ctypes.c_char_p),
        ("source_line", ctypes.c_int),
        ("function", ctypes.c_char_p),
    ]


# libtpusim is not thread-safe (its allocation counter is global): calls that allocate
# hold this lock; ctypes releases the GIL meanwhile.
LOCK = threading.Lock()

_here = os.path.dirname(os.path.abspath(__file__))
_lib = None
_lib_path = None


def library_path():
    """The libtpusim.so this package uses, found as the PJRT plugin finds its own: $TPUSIM_LIBRARY,
    else the one installed in the package, else the one beside $TPUSIM_PJRT_LIBRARY, else the
    repository's build/ (a development checkout on PYTHONPATH)."""
    env = os.environ.get("TPUSIM_LIBRARY")
    if env:
        return env
    candidates = [os.path.join(_here, "libtpusim.so")]
    if os.environ.get("TPUSIM_PJRT_LIBRARY"):
        candidates.append(os.path.join(os.path.dirname(os.path.abspath(os.environ["TPUSIM_PJRT_LIBRARY"])), "libtpusim.so"))
    candidates.append(os.path.normpath(os.path.join(_here, "..", "..", "build", "libtpusim.so")))
    for c in candidates:
        if os.path.exists(c):
            return c
    return candidates[0]


def _declare(lib):
    P = ctypes.POINTER
    vp = ctypes.c_void_p
    sig = {
        "tpu_version": (ctypes.c_char_p, []),
        "tpu_status_name": (ctypes.c_char_p, [ctypes.c_int]),
        "tpu_diag_format": (None, [P(Diag), ctypes.c_char_p, ctypes.c_size_t]),
        "tpu_sim_dtype_size": (ctypes.c_size_t, [ctypes.c_int]),
        "tpu_sim_load_text": (ctypes.c_int, [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t, P(vp), P(Diag)]),
        "tpu_sim_load_file": (ctypes.c_int, [ctypes.c_char_p, P(vp), P(Diag)]),
        "tpu_sim_module_free": (None, [vp]),
        "tpu_sim_module_devices": (ctypes.c_int64, [vp]),
        "tpu_sim_module_nparams": (ctypes.c_int, [vp]),
        "tpu_sim_module_param": (ctypes.c_int, [vp, ctypes.c_int, P(Array), P(Diag)]),
        "tpu_sim_options_init": (None, [P(Options)]),
        "tpu_sim_set_progress": (None, [PROGRESS_FN, vp]),
        "tpu_sim_run": (ctypes.c_int, [vp, P(Options), P(Array), ctypes.c_int, P(vp), P(Diag)]),
        "tpu_sim_result_free": (None, [vp]),
        "tpu_sim_result_noutputs": (ctypes.c_int, [vp]),
        "tpu_sim_result_output": (ctypes.c_int, [vp, ctypes.c_int, P(Array), P(Diag)]),
        "tpu_sim_result_timed": (ctypes.c_int, [vp]),
        "tpu_sim_result_metrics": (ctypes.c_int, [vp, P(Metrics), P(Diag)]),
        "tpu_sim_result_nops": (ctypes.c_int, [vp]),
        "tpu_sim_result_op": (ctypes.c_int, [vp, ctypes.c_int, P(Op), P(Diag)]),
        "tpu_sim_result_write_json": (ctypes.c_int, [vp, ctypes.c_char_p, P(Diag)]),
        "tpu_sim_result_write_trace": (ctypes.c_int, [vp, ctypes.c_char_p, P(Diag)]),
        "tpu_sim_buffer_new": (ctypes.c_int, [P(Array), P(vp), P(Diag)]),
        "tpu_sim_result_take_output": (ctypes.c_int, [vp, ctypes.c_int, P(vp), P(Diag)]),
        "tpu_sim_buffer_array": (ctypes.c_int, [vp, P(Array), P(Diag)]),
        "tpu_sim_buffer_donated": (ctypes.c_int, [vp]),
        "tpu_sim_buffer_free": (None, [vp]),
        "tpu_sim_run_buffers": (ctypes.c_int, [vp, P(Options), P(vp), ctypes.c_int, P(ctypes.c_int), P(vp), P(Diag)]),
        "tpu_sim_cache_configure": (None, [ctypes.c_int]),
        "tpu_sim_cache_clear": (None, []),
        "tpu_sim_cache_stats": (None, [P(ctypes.c_int64), P(ctypes.c_int64), P(ctypes.c_int)]),
    }
    for name, (res, args) in sig.items():
        f = getattr(lib, name)
        f.restype = res
        f.argtypes = args


def lib():
    """The loaded library (loaded on first use)."""
    global _lib, _lib_path
    if _lib is None:
        path = library_path()
        if not os.path.exists(path):
            raise TpusimError(
                f"{path}: error: libtpusim is not there: install the package with `pip install ./python` "
                "or set TPUSIM_LIBRARY to a built libtpusim.so", "TPU_ERR_IO", path)
        lib_ = ctypes.CDLL(path)
        _declare(lib_)
        _lib, _lib_path = lib_, path
    return _lib


def check(status, diag):
    """Raises TpusimError from a failed call's diagnostic."""
    if status == 0:
        return
    buf = ctypes.create_string_buffer(2048)
    lib().tpu_diag_format(ctypes.byref(diag), buf, len(buf))
    name = lib().tpu_status_name(status).decode()
    raise TpusimError(buf.value.decode("utf-8", "replace"), name, diag.file.decode("utf-8", "replace"),
                      diag.line, diag.col, diag.msg.decode("utf-8", "replace"))


def chip_dirs():
    """Where bare chip preset names are looked up (after $TPUSIM_CHIPS, which the library reads)."""
    dirs = [os.path.join(_here, "chips")]
    libdir = os.path.dirname(os.path.abspath(_lib_path or library_path()))
    dirs += [os.path.join(libdir, "chips"), os.path.join(os.path.dirname(libdir), "chips")]
    return dirs


_RESOLVED = {}  # preset name -> the path found for it (the search runs once per name)


def resolve_chip(chip):
    """A preset name becomes the path of its JSON in the package (or beside a development
    build) unless $TPUSIM_CHIPS is set; a path is returned unchanged."""
    chip = os.fspath(chip)
    if "/" in chip or chip.endswith(".json") or os.environ.get("TPUSIM_CHIPS"):
        return chip
    p = _RESOLVED.get(chip)
    if p is not None:
        return p
    for d in chip_dirs():
        p = os.path.join(d, chip + ".json")
        if os.path.exists(p):
            _RESOLVED[chip] = p
            return p
    return chip  # the library's own search (./chips, beside the executable) and its error
