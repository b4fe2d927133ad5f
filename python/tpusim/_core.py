"""Modules and runs: NumPy arrays in, NumPy arrays and a Report out."""
import ctypes
import os

import numpy as np

from . import _lib
from ._lib import TpusimError
from ._report import Report

try:  # bfloat16 as a NumPy dtype (JAX depends on it)
    import ml_dtypes as _ml_dtypes

    _BF16 = np.dtype(_ml_dtypes.bfloat16)
except ImportError:  # pragma: no cover - depends on the environment
    _ml_dtypes = None
    _BF16 = None

# ORDER: tpu_sim_dtype in include/tpusim/tpusim.h.
PRED, S8, S16, S32, S64, U8, U16, U32, U64, BF16, F16, F32, F64, C64, C128, F8E5M2, F8E4M3FN = range(17)
_TO_NP = {
    PRED: np.dtype(np.bool_), S8: np.dtype(np.int8), S16: np.dtype(np.int16), S32: np.dtype(np.int32),
    S64: np.dtype(np.int64), U8: np.dtype(np.uint8), U16: np.dtype(np.uint16), U32: np.dtype(np.uint32),
    U64: np.dtype(np.uint64), F16: np.dtype(np.float16), F32: np.dtype(np.float32), F64: np.dtype(np.float64),
    C64: np.dtype(np.complex64), C128: np.dtype(np.complex128),
}
_NAMES = ["pred", "s8", "s16", "s32", "s64", "u8", "u16", "u32", "u64", "bf16", "f16", "f32", "f64", "c64", "c128",
          "f8e5m2", "f8e4m3fn"]
# float8 as ml_dtypes' types (float32 without ml_dtypes, as bf16)
_F8 = {F8E5M2: np.dtype(_ml_dtypes.float8_e5m2), F8E4M3FN: np.dtype(_ml_dtypes.float8_e4m3fn)} if _ml_dtypes else {}


# the dtype an output's bytes are read as (bf16 and float8 as their bits, then viewed)
_RAW_NP = {**_TO_NP, BF16: np.dtype(np.uint16), F8E5M2: np.dtype(np.uint8), F8E4M3FN: np.dtype(np.uint8)}


def _np_dtype(code):
    """The NumPy dtype an output of this code comes back as (bf16: ml_dtypes.bfloat16, or
    float32 without ml_dtypes)."""
    if code == BF16:
        return _BF16 if _BF16 is not None else np.dtype(np.float32)
    if code in (F8E5M2, F8E4M3FN):
        return _F8.get(code, np.dtype(np.float32))
    return _TO_NP[code]


_BY_KIND = {("b", 1): PRED, ("i", 1): S8, ("i", 2): S16, ("i", 4): S32, ("i", 8): S64, ("u", 1): U8,
            ("u", 2): U16, ("u", 4): U32, ("u", 8): U64, ("f", 2): F16, ("f", 4): F32, ("f", 8): F64,
            ("c", 8): C64, ("c", 16): C128}


_CODES = {}  # dtype -> _code(dtype), filled as dtypes are seen (a run's inputs look theirs up here)


def _code(dt):
    """The tpu_sim_dtype of a native-order NumPy dtype, or None."""
    try:
        return _CODES[dt]
    except (KeyError, TypeError):
        pass
    c = _code_of(np.dtype(dt))
    if len(_CODES) < 256:
        _CODES[dt] = c
    return c


def _code_of(dt):
    if _BF16 is not None and dt == _BF16:
        return BF16
    for code, f8 in _F8.items():
        if dt == f8:
            return code
    return _BY_KIND.get((dt.kind, dt.itemsize))


class Param:
    """An entry parameter: dtype (a NumPy dtype; bf16 as ml_dtypes.bfloat16 or float32),
    the HLO type name and shape (global for a module of several devices)."""

    def __init__(self, code, shape):
        self.hlo_dtype = _NAMES[code]
        self.dtype = _np_dtype(code)
        self.shape = shape

    def __repr__(self):
        return f"Param({self.hlo_dtype}{list(self.shape)})"


class Module:
    """A parsed and verified HLO module (tpu_sim_module). Run it any number of times."""

    def __init__(self, hlo, name=None):
        L = _lib.lib()
        h = ctypes.c_void_p()
        d = _lib.Diag()
        if isinstance(hlo, os.PathLike) or (isinstance(hlo, str) and _looks_like_path(hlo)):
            path = os.fspath(hlo)
            try:
                with open(path, "rb") as f:
                    head = f.read()
            except OSError:  # the C loader reports it
                head = b""
            if b'"tpu_custom_call"' in head and head.count(b'"body":') > head.count(b'"tpusim_mosaic":'):
                hlo, name = head.decode(), path  # Pallas kernels: decoded below (python/tpusim/pallas_decode.py)
        if isinstance(hlo, os.PathLike) or (isinstance(hlo, str) and _looks_like_path(hlo)):
            path = os.fspath(hlo)
            with _lib.LOCK:
                st = L.tpu_sim_load_file(path.encode(), ctypes.byref(h), ctypes.byref(d))
            self.name = path
        else:
            text = hlo.encode() if isinstance(hlo, str) else bytes(hlo)
            if b'"tpu_custom_call"' in text and text.count(b'"body":') > text.count(b'"tpusim_mosaic":'):
                from . import pallas_decode  # needs jax (jaxlib reads the kernels' Mosaic bytecode)
                text = pallas_decode.decode_hlo(text.decode()).encode()
            self.name = name or "<hlo>"
            with _lib.LOCK:
                st = L.tpu_sim_load_text(self.name.encode(), text, len(text), ctypes.byref(h), ctypes.byref(d))
        _lib.check(st, d)
        self._h = h
        self._free = L.tpu_sim_module_free
        self.devices = int(L.tpu_sim_module_devices(h))
        self.params = []
        for i in range(L.tpu_sim_module_nparams(h)):
            a = _lib.Array()
            d = _lib.Diag()
            with _lib.LOCK:
                st = L.tpu_sim_module_param(h, i, ctypes.byref(a), ctypes.byref(d))
            if st == 0:
                self.params.append(Param(a.dtype, tuple(a.dims[k] for k in range(a.rank))))
            else:
                self.params.append(None)  # a tuple or token parameter

    def __del__(self):
        h = getattr(self, "_h", None)
        if h:
            self._free(h)
            self._h = None

    def __repr__(self):
        return f"<tpusim.Module {self.name}: {len(self.params)} parameter(s), {self.devices} device(s)>"

    def run(self, inputs=None, *, backend="tpu", chip="v5e", precision=None, mode="full", out_shardings=None,
            mesh=None, topology=None, slices=None, progress=None, windowed_einsum=True):
        """Runs the entry computation; see tpusim.run."""
        L = _lib.lib()
        # The options struct of these settings is built once per Module (ctypes keeps the
        # strings it points to alive).
        memo = self.__dict__.setdefault("_opts_memo", {})
        key = None
        if out_shardings is None:
            key = (backend, chip, precision, mode, mesh, topology, slices, bool(windowed_einsum),
                   os.environ.get("TPUSIM_CHIPS"))
        try:
            hit = memo.get(key) if key is not None else None
        except TypeError:  # an unhashable setting (a dict mesh)
            key = hit = None
        if hit is None:
            hit = self._options(backend, chip, precision, mode, out_shardings, mesh, topology, slices,
                                windowed_einsum)
            if key is not None and len(memo) < 16:
                memo[key] = hit
        o, keep_opts = hit
        arrays, keep = self._inputs(inputs if inputs is not None else [], mode)
        r = ctypes.c_void_p()
        d = _lib.Diag()
        bar = _Progress(progress, self.name) if mode != "timing" else None
        with _lib.LOCK:
            if bar is not None and bar.active:
                L.tpu_sim_set_progress(bar.fn, None)
            try:
                st = L.tpu_sim_run(self._h, ctypes.byref(o), arrays, len(keep), ctypes.byref(r), ctypes.byref(d))
            finally:
                if bar is not None and bar.active:
                    L.tpu_sim_set_progress(_lib.PROGRESS_FN(), None)
                    bar.close()
        del keep, keep_opts
        _lib.check(st, d)
        res = _Result(r)
        outputs = None if mode == "timing" else res.outputs()
        report = Report(res, self.name) if L.tpu_sim_result_timed(r) else None
        if slices is not None:  # only a run over slices widens the program (reading the report costs)
            self._widened(report)
        return outputs, report

    def _widened(self, report):
        """One slice's program from the TPU compiler (megascale send/recv pairs) runs widened
        to the run's slices: .devices counts the devices of that run (slices x one slice's)."""
        if report is not None and report.devices > self.devices:
            self.devices = report.devices

    def call(self, inputs, *, donate=None, backend="tpu", chip="v5e", precision=None, out_shardings=None, mesh=None,
             topology=None, slices=None, progress=None, windowed_einsum=True):
        """Runs the entry computation on inputs kept in tpusim and returns its outputs kept
        there too: (outputs, report), outputs a list of tpusim.Array (None for a token).
        inputs: tpusim.Array (read in place) or anything tpusim.run takes (copied in).
        donate: indices of inputs given up to the run (as jax.jit's donate_argnums): each
        such Array is deleted once the run succeeds. See docs/python.md."""
        from ._buffer import call_module

        o, keep_opts = self._options(backend, chip, precision, "full", out_shardings, mesh, topology, slices,
                                     windowed_einsum)
        try:
            outs, report = call_module(self, o, inputs, donate, progress)
            if slices is not None:
                self._widened(report)
            return outs, report
        finally:
            del keep_opts

    def _options(self, backend, chip, precision, mode, out_shardings, mesh, topology, slices, windowed_einsum=True):
        """A tpu_sim_options struct, and what its strings point into (kept alive by the caller)."""
        L = _lib.lib()
        o = _lib.Options()
        L.tpu_sim_options_init(ctypes.byref(o))
        o.backend = backend.encode()
        o.mode = mode.encode()
        if backend == "tpu":
            o.chip = _lib.resolve_chip(chip).encode()
            if precision is not None:
                o.precision = precision.encode()
        elif precision is not None:
            raise TpusimError("error: a precision needs the tpu backend", "TPU_ERR_ARG")
        if mesh is not None:
            if isinstance(mesh, dict):
                mesh = ",".join(f"{k}={v}" for k, v in mesh.items())
            o.mesh = str(mesh).encode()
        if topology is not None:
            o.topology = str(topology).encode()
        if slices is not None:
            o.slices = int(slices)
        # False: gather and reduce-scatter where the chip's XLA compiler runs a windowed einsum
        o.no_windowed_einsum = 0 if windowed_einsum else 1
        if out_shardings is not None:
            shs = [out_shardings] if isinstance(out_shardings, str) else list(out_shardings)
            keep = (ctypes.c_char_p * max(1, len(shs)))(*[s.encode() for s in shs])
            o.out_shardings = keep
            o.n_out_shardings = len(shs)
            return o, keep
        return o, None

    def _inputs(self, inputs, mode):
        """The inputs as tpu_sim_array structs (and the arrays they point into, kept alive
        for the call). An array keeps its dtype; anything else (a list, a Python number)
        takes the parameter's dtype."""
        if isinstance(inputs, np.ndarray):
            inputs = [inputs]
        inputs = list(inputs)
        keep = []
        arrs = (_lib.Array * max(1, len(inputs)))()
        for i, x in enumerate(inputs):
            keep.append(_fill_array(arrs[i], x, i, self.params[i] if i < len(self.params) else None))
        return arrs, keep


def _fill_array(s, x, i, param):
    """Fills the tpu_sim_array s from x (input i; `param` gives the dtype of a list or a
    Python number) and returns the NumPy array s points into (keep it alive)."""
    if not hasattr(x, "dtype"):  # a list or a Python scalar
        x = np.asarray(x, dtype=param.dtype if param is not None else None)
    a = np.asarray(x)
    if not a.flags.c_contiguous:  # (np.ascontiguousarray would make a 0-d array 1-d)
        a = a.copy(order="C")
    if not a.dtype.isnative:
        a = a.astype(a.dtype.newbyteorder("="))
    code = _code(a.dtype)
    if code is None:
        raise TpusimError(f"error: input {i} has dtype {a.dtype}, which tpusim does not take", "TPU_ERR_ARG")
    if a.ndim > _lib.MAX_RANK:
        raise TpusimError(f"error: input {i} has rank {a.ndim} (at most {_lib.MAX_RANK})", "TPU_ERR_ARG")
    s.dtype = code
    s.rank = a.ndim
    s.dims[:a.ndim] = a.shape
    n = a.nbytes
    s.nbytes = n
    if n:
        try:  # a writable array's address, without building a.ctypes (a third of a run of a small program)
            s.data = ctypes.addressof(ctypes.c_char.from_buffer(a))
        except (TypeError, ValueError, BufferError):  # read-only (e.g. from a JAX array)
            s.data = a.ctypes.data
    else:
        s.data = None
    return a


def _to_numpy(a, owner, copy=False):
    """The NumPy array of a filled tpu_sim_array: a view of its memory that keeps `owner`
    alive, or a copy. bf16 as ml_dtypes.bfloat16 (float32 without ml_dtypes)."""
    code = a.dtype
    shape = tuple(a.dims[:a.rank])
    raw_dt = _RAW_NP[code]
    n = a.nbytes
    if n:
        buf = (ctypes.c_char * n).from_address(a.data)
        buf._owner = owner  # the view keeps the owner alive
        arr = np.frombuffer(buf, dtype=raw_dt).reshape(shape)
        if copy:
            arr = arr.copy()
    else:
        arr = np.zeros(shape, dtype=raw_dt)
    if code == BF16:
        if _BF16 is not None:
            arr = arr.view(_BF16)
        else:  # exact widening, as the CLI writes bf16 results
            arr = (arr.astype(np.uint32) << 16).view(np.float32)
    elif code in (F8E5M2, F8E4M3FN):
        arr = arr.view(_F8[code]) if code in _F8 else _f8_widen(arr, code == F8E4M3FN)
    return arr


def _f8_widen(bits, e4m3fn):
    """float8 bytes as float32 without ml_dtypes (exact)."""
    b = bits.astype(np.int64)
    ebits, mbits, bias = (4, 3, 7) if e4m3fn else (5, 2, 15)
    e = (b >> mbits) & ((1 << ebits) - 1)
    m = b & ((1 << mbits) - 1)
    v = np.where(e == 0, m * 2.0 ** (1 - bias - mbits), (1 + m / 2.0 ** mbits) * 2.0 ** (e - bias))
    top = (1 << ebits) - 1
    if e4m3fn:
        v = np.where((e == top) & (m == (1 << mbits) - 1), np.nan, v)
    else:
        v = np.where(e == top, np.where(m == 0, np.inf, np.nan), v)
    return np.where(b & 0x80, -v, v).astype(np.float32)


_TQDM = None  # whether tqdm imports, found at the first run that asks


def _have_tqdm():
    """Whether tqdm is installed, looked up once: a failed import is not remembered by Python,
    and searching sys.path for it again took hundreds of microseconds on every run."""
    global _TQDM
    if _TQDM is None:
        try:
            import tqdm  # noqa: F401

            _TQDM = True
        except ImportError:
            _TQDM = False
    return _TQDM


class _Progress:
    """A tqdm bar over the entry computation's instructions while values are computed (the
    loop iteration in its postfix), shown once a run has taken a second. progress: None (a
    bar when tqdm is installed), True (a bar; tqdm required), False (none), or a callable
    taking (step, nsteps, iteration)."""

    def __init__(self, progress, name):
        self.active = False
        self.bar = None
        self.user = None
        if progress is False:
            return
        if callable(progress):
            self.user = progress
        else:
            if not _have_tqdm():
                if progress:
                    raise TpusimError("error: progress=True needs tqdm (pip install tqdm)", "TPU_ERR_ARG")
                return
        self.name = name
        self.active = True
        self.fn = _lib.PROGRESS_FN(self._on)  # kept alive while the run lasts

    def _on(self, user, step, nsteps, iteration):
        try:
            if self.user is not None:
                self.user(int(step), int(nsteps), int(iteration))
                return
            if self.bar is None:
                from tqdm.auto import tqdm
                self.bar = tqdm(total=int(nsteps), desc=f"tpusim {self.name}", unit="op", delay=1.0, leave=False)
            if step != self.bar.n:
                self.bar.update(int(step) - self.bar.n)
            if iteration:
                self.bar.set_postfix_str(f"loop iteration {int(iteration)}", refresh=False)
        except Exception:  # a display problem must not break the run
            pass

    def close(self):
        if self.bar is not None:
            self.bar.close()


def _looks_like_path(s):
    return "\n" not in s and "HloModule" not in s and len(s) < 4096


class _Result:
    """Owns a tpu_sim_result; outputs are NumPy views of its memory (zero copy) and keep it alive."""

    def __init__(self, h):
        self._h = h
        self._free = _lib.lib().tpu_sim_result_free

    def __del__(self):
        h = getattr(self, "_h", None)
        if h:
            self._free(h)
            self._h = None

    def outputs(self):
        L = _lib.lib()
        outs = []
        a = _lib.Array()  # refilled per output: _to_numpy copies what it needs
        d = _lib.Diag()
        ra, rd = ctypes.byref(a), ctypes.byref(d)
        get = L.tpu_sim_result_output
        for i in range(L.tpu_sim_result_noutputs(self._h)):
            st = get(self._h, i, ra, rd)
            if st:
                _lib.check(st, d)
            if a.dtype < 0:  # a token
                outs.append(None)
                continue
            outs.append(_to_numpy(a, self))
        return outs


def load(hlo, name=None):
    """Parses and verifies an HLO module: a path (str or os.PathLike) or the text itself
    (a str containing "HloModule" or a newline, or bytes). Raises TpusimError with the
    "file:line:col: error: ..." message when it is bad."""
    return Module(hlo, name)


def run(hlo_text_or_path, inputs=None, *, backend="tpu", chip="v5e", precision=None, mode="full",
        out_shardings=None, mesh=None, topology=None, slices=None, progress=None, windowed_einsum=True):
    """Runs an HLO module's entry computation on tpusim.

    hlo_text_or_path: HLO text (as jax's lower(...).as_text(dialect="hlo") prints it), a
      path to it, or a Module from tpusim.load.
    inputs: one array per entry parameter, in order (None or [] in timing mode). The dtype
      must match the parameter, except that float32 is taken for bf16/f16 parameters and
      rounded to nearest even; lists and Python numbers take the parameter's dtype. A module
      of several devices takes global arrays (cut by each parameter's sharding=).
    backend: "tpu" (TPU numerics, and timing) or "ref" (the reference interpreter, no report).
    chip: a preset name ("v5e", "v5p", ...; tpusim chips lists them) or a chip JSON path.
    precision: None (each dot's operand_precision), "default", "high" or "highest".
    mode: "full" (values and timing) or "timing" (timing only: no inputs, outputs None).
    out_shardings: for modules of several devices, the result's sharding in HLO syntax, one
      string for all leaves or one per leaf (XLA's compiled text does not carry it).
    mesh: a program with sharding annotations (JAX's lowered HLO of a sharded jit) is
      partitioned over a device mesh first (docs/spmd.md): "data=2,model=4" or
      {"data": 2, "model": 4}; None takes the mesh the module's header names.
    topology: for modules of several devices, the slice the collectives are timed on, as
      `tpusim run --topology` takes it ("v5p-256", "4x4x8"); None: the chip's default slice.
    slices: how many such slices DCN joins (`--slices`); None: one.
    windowed_einsum: False partitions with all-gathers and reduce-scatters where the chip's
      XLA compiler passes a dot's operand or partial sums round a ring (`--no-windowed-einsum`).
    progress: while values are computed, a tqdm bar over the entry's instructions once a run
      has taken a second (None: when tqdm is installed; True: required; False: none), or a
      callable taking (step, nsteps, loop_iteration).

    Returns (outputs, report): outputs a list of NumPy arrays, one per leaf of the result
    (None in timing mode); report a Report (None with backend="ref").
    """
    m = hlo_text_or_path if isinstance(hlo_text_or_path, Module) else Module(hlo_text_or_path)
    return m.run(inputs, backend=backend, chip=chip, precision=precision, mode=mode, out_shardings=out_shardings,
                 mesh=mesh, topology=topology, slices=slices, progress=progress, windowed_einsum=windowed_einsum)


def cache_info():
    """The cache of compiled programs (docs/python.md): {"hits", "misses", "entries"} since
    the last cache_clear. A run of a module text already run with the same options (chip,
    precision, mesh, topology, ...) reuses its compiled program and timing."""
    L = _lib.lib()
    h, m, e = ctypes.c_int64(), ctypes.c_int64(), ctypes.c_int()
    with _lib.LOCK:
        L.tpu_sim_cache_stats(ctypes.byref(h), ctypes.byref(m), ctypes.byref(e))
    return {"hits": h.value, "misses": m.value, "entries": e.value}


def cache_clear():
    """Empties the cache of compiled programs (results still held stay valid)."""
    with _lib.LOCK:
        _lib.lib().tpu_sim_cache_clear()


def set_cache_size(entries):
    """Keeps at most `entries` compiled programs (0: no cache; default 16, or
    $TPUSIM_CACHE_ENTRIES)."""
    with _lib.LOCK:
        _lib.lib().tpu_sim_cache_configure(int(entries))
