"""JAX plugin for tpusim: `JAX_PLATFORMS=tpusim python train.py` runs an unchanged JAX
script on a simulated TPU slice (docs/pjrt.md).

JAX finds this module in the `jax_plugins` namespace package and calls `initialize()`,
which registers libtpusim_pjrt.so (a PJRT C-API plugin) as the platform "tpusim". The
plugin hands every program JAX compiles back to `_convert` below, which turns JAX's
StableHLO into HLO text with JAX's own MLIR bindings and describes the program's
signature (which block of each global array every device holds); the plugin then runs it
with libtpusim.

Settings (environment):
  TPUSIM_CHIP       chip preset or chip JSON (default v5e)
  TPUSIM_TOPOLOGY   the slice: "2x2", "2x2x1", "v5e-8" (its chips are the devices)
  TPUSIM_DEVICES    number of devices when no topology is given (default 1)
  TPUSIM_BACKEND    "tpu" (default: TPU numerics and timing) or "ref" (reference interpreter)
  TPUSIM_PRECISION  "default", "high" or "highest" for every f32 dot (default: per op)
  TPUSIM_PJRT_LIBRARY  the plugin library (default: beside the installed tpusim package,
                    else the repository's build/)
"""
import ctypes
import importlib.util
import os
import re

import numpy as np

from tpusim._hlotext import drop_empty_meshes, expand_batch_norm, f8_as_f32

_lib = None
_callback = None

_DTYPES = {
    "bool": 0, "int8": 1, "int16": 2, "int32": 3, "int64": 4, "uint8": 5, "uint16": 6,
    "uint32": 7, "uint64": 8, "bfloat16": 9, "float16": 10, "float32": 11, "float64": 12,
    "complex64": 13, "complex128": 14,
}

# float8 arrays: tpusim computes them as f32 (tpusim._hlotext.f8_as_f32); their buffers hold
# the PJRT type (F8E5M2 16, F8E4M3FN 17).
_F8 = {"float8_e5m2": 16, "float8_e4m3fn": 17}

_COMPILER_FN = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t,
                                ctypes.c_char_p, ctypes.c_void_p, ctypes.c_size_t)


def library_path():
    """The plugin library: $TPUSIM_PJRT_LIBRARY, the installed package's, or the build tree's."""
    env = os.environ.get("TPUSIM_PJRT_LIBRARY")
    if env:
        return env
    candidates = []
    spec = importlib.util.find_spec("tpusim")
    if spec is not None and spec.submodule_search_locations:
        candidates += [os.path.join(d, "libtpusim_pjrt.so") for d in spec.submodule_search_locations]
    if os.environ.get("TPUSIM_LIBRARY"):
        candidates.append(os.path.join(os.path.dirname(os.environ["TPUSIM_LIBRARY"]), "libtpusim_pjrt.so"))
    here = os.path.dirname(os.path.abspath(__file__))
    candidates.append(os.path.join(here, "..", "..", "..", "build", "libtpusim_pjrt.so"))
    for c in candidates:
        if os.path.exists(c):
            return os.path.normpath(c)
    return os.path.normpath(candidates[-1])


def devices_of_topology(topology):
    """Devices of a slice written as "AxBxC" or "NAME-CHIPS" ("v5e-8"); None if neither."""
    if not topology:
        return None
    if re.fullmatch(r"\d+(x\d+)*", topology):
        n = 1
        for part in topology.split("x"):
            n *= int(part)
        return n
    m = re.fullmatch(r"[A-Za-z0-9]+-(\d+)", topology)
    return int(m.group(1)) if m else None


def chip_path(chip):
    """A bare preset name as the JSON file beside the plugin (an installed package's chips/ or
    the repository's), so that an installed plugin finds it; unchanged when $TPUSIM_CHIPS is
    set (the library reads it), for a path, or when no such file exists."""
    if "/" in chip or chip.endswith(".json") or os.environ.get("TPUSIM_CHIPS"):
        return chip
    libdir = os.path.dirname(os.path.abspath(library_path()))
    for d in (os.path.join(libdir, "chips"), os.path.join(os.path.dirname(libdir), "chips")):
        f = os.path.join(d, chip + ".json")
        if os.path.exists(f):
            return f
    return chip


def client_options():
    """The options the plugin's client is created with, from the TPUSIM_* variables."""
    topology = os.environ.get("TPUSIM_TOPOLOGY", "")
    n = os.environ.get("TPUSIM_DEVICES")
    n = int(n) if n else (devices_of_topology(topology) or 1)
    opts = {"chip": chip_path(os.environ.get("TPUSIM_CHIP", "v5e")), "num_devices": n}
    if topology:
        opts["topology"] = topology
    for key, env in (("backend", "TPUSIM_BACKEND"), ("precision", "TPUSIM_PRECISION")):
        if os.environ.get(env):
            opts[key] = os.environ[env]
    return opts


def load_library():
    """The plugin library, loaded once (the same handle JAX's dlopen gets)."""
    global _lib
    if _lib is None:
        lib = ctypes.CDLL(library_path())
        lib.tpusim_pjrt_set_compiler.argtypes = [_COMPILER_FN]
        lib.tpusim_pjrt_set_compiler.restype = None
        lib.tpusim_pjrt_compile_result.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_char_p,
                                                   ctypes.c_char_p, ctypes.c_size_t]
        lib.tpusim_pjrt_compile_result.restype = ctypes.c_int
        lib.tpusim_pjrt_compile_error.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
        lib.tpusim_pjrt_compile_error.restype = ctypes.c_int
        lib.tpusim_pjrt_last_run.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
        lib.tpusim_pjrt_last_run.restype = ctypes.c_int64
        lib.tpusim_pjrt_last_write.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t]
        lib.tpusim_pjrt_last_write.restype = ctypes.c_int
        _lib = lib
    return _lib


# ---- StableHLO -> HLO text and the signature ----

def _varint(b, i):
    v = s = 0
    while True:
        c = b[i]
        i += 1
        v |= (c & 0x7F) << s
        s += 7
        if c < 0x80:
            return v, i


def _proto_fields(b):
    """(field, wire type, value) of a serialized protobuf message (varint and length-delimited)."""
    i = 0
    while i < len(b):
        key, i = _varint(b, i)
        f, wt = key >> 3, key & 7
        if wt == 0:
            v, i = _varint(b, i)
        elif wt == 2:
            n, i = _varint(b, i)
            v, i = b[i:i + n], i + n
        elif wt == 1:
            v, i = b[i:i + 8], i + 8
        elif wt == 5:
            v, i = b[i:i + 4], i + 4
        else:
            raise ValueError("unsupported protobuf wire type %d" % wt)
        yield f, wt, v


def _device_assignment(serialized, nrep, npart):
    """Logical device (replica-major) -> device id, from a DeviceAssignmentProto
    (computation_devices[partition].replica_device_ids[replica])."""
    cols = []
    for f, wt, v in _proto_fields(serialized):
        if f == 3 and wt == 2:
            ids = []
            for g, gwt, gv in _proto_fields(v):
                if g == 1 and gwt == 2:
                    j = 0
                    while j < len(gv):
                        x, j = _varint(gv, j)
                        ids.append(x)
                elif g == 1:
                    ids.append(gv)
            cols.append(ids)
    if len(cols) != npart or any(len(c) != nrep for c in cols):
        return list(range(nrep * npart))
    return [cols[p][r] for r in range(nrep) for p in range(npart)]


def _braced(text, i):
    """The {...} group starting at text[i] == '{' (braces inside "..." strings do not count)."""
    depth, quoted = 0, False
    j = i
    while j < len(text):
        c = text[j]
        if quoted:
            if c == "\\":
                j += 1
            elif c == '"':
                quoted = False
        elif c == '"':
            quoted = True
        elif c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0:
                return text[i:j + 1]
        j += 1
    raise ValueError("unbalanced braces in HLO text")


# An instruction's HLO sharding attribute, `sharding={...}`; not Shardy's
# `xla.sdy.sharding="..."` inside frontend_attributes.
_SHARDING_ATTR = re.compile(r"(?<![\w.])sharding=\{")


def _entry_shardings(hlo_text, nparams):
    """HLO sharding strings of the entry parameters and of the ROOT (None where absent)."""
    m = re.search(r"^ENTRY [^\n]*\{\n(.*?)^\}", hlo_text, re.S | re.M)
    if not m:
        raise ValueError("no ENTRY computation in the converted HLO")
    params, root = [None] * nparams, None
    for line in m.group(1).split("\n"):
        k = _SHARDING_ATTR.search(line)
        s = _braced(line, k.end() - 1) if k else None
        pm = re.search(r"\bparameter\((\d+)\)", line)
        if pm and int(pm.group(1)) < nparams:
            params[int(pm.group(1))] = s
        if line.lstrip().startswith("ROOT "):
            root = s
    return params, root


def _aliases(hlo_text, tupled, pinfo, rinfo):
    """(result, parameter) pairs of the donation JAX asks for (donate_argnums), from the
    HloModule line: `input_output_alias={ {0}: (0, {}, may-alias), ... }` names them;
    `buffer_donor={ (0, {}), ... }` (sharded programs) leaves the pairing to the compiler, which
    gives each donor the first result not yet paired with the same type, shape and blocks on
    every device (pinfo/rinfo: the signature lines of the parameters and results)."""
    head = hlo_text.split("\n", 1)[0]
    pairs = []
    k = head.find("buffer_donor=")
    if k >= 0:
        for param, pidx in re.findall(r"\(\s*(\d+)\s*,\s*\{([\d,\s]*)\}\s*\)",
                                      _braced(head, k + len("buffer_donor="))):
            param = int(param)
            if pidx.strip() or param >= len(pinfo):
                continue
            taken = {o for o, _ in pairs}
            for o, info in enumerate(rinfo):
                if o not in taken and info == pinfo[param]:
                    pairs.append((o, param))
                    break
    k = head.find("input_output_alias=")
    if k < 0:
        return pairs
    body = _braced(head, k + len("input_output_alias="))
    for out, param, pidx in re.findall(r"\{\s*([\d,\s]*)\}\s*:\s*\(\s*(\d+)\s*,\s*\{([\d,\s]*)\}", body):
        out = [int(v) for v in out.replace(",", " ").split()]
        if pidx.strip() or len(out) != (1 if tupled else 0):
            continue  # an alias into a tuple parameter or a nested result: not JAX's form
        pairs.append((out[0] if tupled else 0, int(param)))
    return pairs


def _blocks(sharding, dims, ndev):
    """(local dims, per-device starts) of an array of global `dims` under an HLO sharding
    (an xla_client.HloSharding or None = replicated) over `ndev` logical devices."""
    rank = len(dims)
    if sharding is None or sharding.is_replicated() or sharding.is_maximal() or not sharding.is_tiled():
        return list(dims), [[0] * rank for _ in range(ndev)]
    tiles = list(sharding.tile_assignment_dimensions())
    devs = list(sharding.tile_assignment_devices())
    local = []
    for k in range(rank):
        if dims[k] % tiles[k]:
            raise NotImplementedError(
                "dimension %d of size %d does not divide over %d devices (uneven shards)" % (k, dims[k], tiles[k]))
        local.append(dims[k] // tiles[k])
    starts = [None] * ndev
    for flat, dev in enumerate(devs):
        idx = np.unravel_index(flat, tiles)
        starts[dev] = [int(idx[k]) * local[k] for k in range(rank)]
    if any(s is None for s in starts):
        raise NotImplementedError("a sharding that leaves some of the program's devices without a block")
    return local, starts


def _is_token(shape):
    return not shape.is_tuple() and str(shape).startswith("token")


def tokens_as_pred(text):
    """The entry computation's token parameters and results (JAX's ordered effects: io_callback
    with ordered=True, ordered debug prints) as pred[0] arrays, which is what JAX hands the
    runtime for them: each token parameter becomes a pred[0] parameter beside an after-all
    that takes its place; each token in the root tuple becomes an empty pred[0] constant."""
    lines = text.split("\n")
    try:
        start = next(i for i, ln in enumerate(lines) if ln.startswith("ENTRY "))
    except StopIteration:
        return text
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("}")), len(lines))
    renames = {}
    body = []
    for ln in lines[start + 1:end]:
        m = re.match(r"^(\s*)(ROOT )?(%?[\w.\-]+) = token\[\] parameter\((\d+)\)(.*)$", ln)
        if m:
            ind, name = m.group(1), m.group(3)
            renames[name] = name + ".tokenarg"
            body.append("%s%s = pred[0]{0} parameter(%s)%s" % (ind, renames[name], m.group(4), m.group(5)))
            body.append("%s%s = token[] after-all()" % (ind, name))
            continue
        m = re.match(r"^(\s*)ROOT (%?[\w.\-]+) = \((.*?)\) tuple\((.*?)\)(.*)$", ln)
        if m and "token[]" in m.group(3):
            ind = m.group(1)
            types = [t.strip() for t in re.split(r",(?![^{\[]*[}\]])", m.group(3))]
            ops = [o.strip() for o in m.group(4).split(",")]
            if len(types) == len(ops):
                for k, t in enumerate(types):
                    if t == "token[]":
                        body.append("%stoken.result.%d = pred[0]{0} constant({})" % (ind, k))
                        types[k], ops[k] = "pred[0]{0}", "token.result.%d" % k
                ln = "%sROOT %s = (%s) tuple(%s)%s" % (ind, m.group(2), ", ".join(types), ", ".join(ops), m.group(5))
        body.append(ln)
    if not renames and body == lines[start + 1:end]:
        return text
    head = [re.sub(r"token\[\]", "pred[0]{0}", ln) if ln.startswith("HloModule") else ln for ln in lines[:start]]
    entry = re.sub(r"token\[\]", "pred[0]", lines[start])
    return "\n".join(head + [entry] + body + lines[end:])


def _array_info(shape, sharding, ndev):
    if _is_token(shape):  # an ordered effect's token: JAX passes an empty pred array for it
        return " ".join(str(t) for t in [_DTYPES["bool"], 1, 0, 0] + [0] * ndev)
    if shape.is_tuple():
        raise NotImplementedError("tuple parameters or results")
    dt = np.dtype(shape.numpy_dtype()).name
    if dt not in _DTYPES and dt not in _F8:
        raise NotImplementedError("element type %s" % dt)
    dims = list(shape.dimensions())
    local, starts = _blocks(sharding, dims, ndev)
    code = _DTYPES[dt] if dt in _DTYPES else "%d/%d" % (_DTYPES["float32"], _F8[dt])  # f8: run as f32
    toks = [code, len(dims)] + dims + local + [x for s in starts for x in s]
    return " ".join(str(t) for t in toks)


def convert(code, fmt, options):
    """(HLO text, signature, the program for PJRT_Executable_OptimizedProgram as StableHLO) for
    a program JAX (format "mlir": StableHLO, as a portable artifact or plain bytecode) or
    PyTorch/XLA (format "hlo": a serialized HloModuleProto) compiles."""
    from jax._src.lib import _jax, hlo as hlo_lib, xla_client as xc

    if fmt not in ("mlir", "hlo"):
        raise NotImplementedError("program format %r (tpusim takes StableHLO, format 'mlir', or an HloModuleProto, "
                                  "format 'hlo')" % fmt)
    opts = xc.CompileOptions.ParseFromString(options)
    if opts.parameter_is_tupled_arguments:
        raise NotImplementedError("tupled arguments")
    build = opts.executable_build_options
    nrep, npart = max(build.num_replicas, 1), max(build.num_partitions, 1)
    if nrep > 1 and npart > 1:
        raise NotImplementedError("%d replicas x %d partitions (one or the other)" % (nrep, npart))
    ndev = nrep * npart
    if fmt == "hlo":
        comp = xc.XlaComputation(code)
        code = _jax.mlir.hlo_to_stablehlo(code)  # what XLA:CPU (shardings) and OptimizedProgram take
    else:
        try:
            comp = _jax.mlir.mlir_module_to_xla_computation(code, use_tuple_args=False)
        except Exception:
            comp = _jax.mlir.mlir_module_to_xla_computation(
                _jax.mlir.deserialize_portable_artifact(code), use_tuple_args=False)
    module = comp.as_hlo_module()
    print_opts = hlo_lib.HloPrintOptions.short_parsable()
    print_opts.print_metadata = True
    text = tokens_as_pred(f8_as_f32(expand_batch_norm(drop_empty_meshes(module.to_string(print_opts)))))
    if 'custom_call_target="tpu_custom_call"' in text:  # Pallas kernels: decoded for libtpusim
        from tpusim import pallas_decode
        text = pallas_decode.decode_hlo(text)
    assign = list(range(ndev))
    if build.device_assignment is not None:
        assign = _device_assignment(build.device_assignment.serialize(), nrep, npart)
    pshape = comp.program_shape()
    params = pshape.parameter_shapes()
    result = pshape.result_shape()
    results = result.tuple_shapes() if result.is_tuple() else [result]
    if ndev > 1 and nrep > 1:
        raise NotImplementedError("replicated (pmap-style) programs of %d replicas: JAX's pmap lowers to "
                                  "partitions since 0.7, which tpusim runs" % nrep)
    psh, rsh = _entry_shardings(text, len(params)) if ndev > 1 else ([None] * len(params), None)
    psh = [xc.HloSharding.from_string(s) if s else None for s in psh]
    xla = _xla_shardings(code, options, assign, len(params), len(results)) if ndev > 1 else None
    if xla is not None:
        psh, rsh = xla
        text = _with_root_sharding(text, xc, result, rsh)
    elif rsh:
        r = xc.HloSharding.from_string(rsh)
        if r.tuple_elements():
            rsh = list(r.tuple_elements())
        else:
            rsh = [r] * len(results)
    else:
        rsh = [None] * len(results)
    if len(rsh) != len(results):
        raise ValueError("%d result shardings for %d results" % (len(rsh), len(results)))
    lines = ["name %s" % re.sub(r"\s", "_", comp.name() or "program"),
             "replicas %d partitions %d" % (nrep, npart),
             "assign " + " ".join(str(a) for a in assign),
             "params %d" % len(params)]
    pinfo = [_array_info(s, sh, ndev) for s, sh in zip(params, psh)]
    lines += pinfo
    lines.append("outputs %d" % len(results))
    rinfo = [_array_info(s, sh, ndev) for s, sh in zip(results, rsh)]
    lines += rinfo
    aliases = _aliases(text, result.is_tuple(), pinfo, rinfo)
    lines.append("aliases %d %s" % (len(aliases), " ".join("%d %d" % a for a in aliases)))
    program = code
    if ndev > 1:
        program = _with_spmd_shardings(comp, xc, psh, rsh, result)
    return text, "\n".join(lines) + "\n", program


_cpu_clients = {}


def _xla_shardings(code, options, assign, nparams, nresults):
    """The shardings XLA gives the program's parameters and results: those the program names
    (in_shardings / out_shardings, sharding constraints, Shardy or GSPMD attributes) and those
    its sharding propagation chooses for the ones JAX left open, as JAX on a TPU would get them
    back from the compiled executable. Found by compiling the same module with the same
    options for XLA:CPU (a private client with as many devices, used for nothing else); None
    when XLA:CPU cannot compile it (a custom call only a TPU has), and the caller falls back on
    the shardings written in the HLO."""
    from jax._src.interpreters import mlir as jmlir
    from jax._src.lib import _jax, xla_client as xc
    from jax._src.lib.mlir import ir

    n = max(assign) + 1
    try:
        client = _cpu_clients.get(n)
        if client is None:
            client = _cpu_clients[n] = xc.make_cpu_client(num_devices=n)
        devs = client.devices()
        with jmlir.make_ir_context():
            try:  # a portable artifact (VHLO), as JAX sends plugins, or plain StableHLO
                module = _jax.mlir.deserialize_portable_artifact(code)
            except Exception:  # noqa: BLE001
                module = ir.Module.parse(code)
            exe = client.compile_and_load(module, executable_devices=xc.DeviceList(tuple(devs[a] for a in assign)),
                                          compile_options=xc.CompileOptions.ParseFromString(options))
        ps, rs = exe.get_parameter_shardings(), exe.get_output_shardings()
    except Exception:  # noqa: BLE001 - XLA:CPU refuses it: the HLO's own shardings then
        return None
    if ps is None or rs is None or len(ps) != nparams or len(rs) != nresults:
        return None
    return [xc.HloSharding.from_proto(s) for s in ps], [xc.HloSharding.from_proto(s) for s in rs]


def _with_root_sharding(text, xc, result, rsh):
    """The HLO text with the ENTRY ROOT's sharding= set to the results' shardings, so that
    tpusim's partitioner leaves each result where XLA does (and times that layout)."""
    s = str(xc.HloSharding.tuple_sharding(result, list(rsh)) if result.is_tuple() else rsh[0])
    m = re.search(r"^ENTRY [^\n]*\{\n", text, re.M)
    i = text.find("\n  ROOT ", m.end() - 1) if m else -1
    if i < 0:
        return text
    j = text.find("\n", i + 1)
    j = len(text) if j < 0 else j
    line = text[i:j]
    k = _SHARDING_ATTR.search(line)
    if k:
        old = _braced(line, k.end() - 1)
        line = line[:k.end() - 1] + s + line[k.end() - 1 + len(old):]
    else:
        line += ", sharding=" + s
    return text[:i] + line + text[j:]


def _with_spmd_shardings(comp, xc, psh, rsh, result):
    """The program as StableHLO (converted back from its HLO, so without Shardy ops) with
    mhlo.spmd_parameters_shardings / mhlo.spmd_output_sharding set to where the plugin leaves
    each array (None: replicated, as the plugin treats it). PJRT_Executable_OptimizedProgram
    returns it (format "mlir"): that is how JAX learns the shardings of the arguments and
    results it left unspecified."""
    from jax._src.interpreters import mlir as jmlir
    from jax._src.lib import _jax
    from jax._src.lib.mlir import ir

    rep = xc.HloSharding.replicate()
    rs = [s or rep for s in rsh]
    out = xc.HloSharding.tuple_sharding(result, rs) if result.is_tuple() else rs[0]
    with jmlir.make_ir_context():
        m = ir.Module.parse(_jax.mlir.hlo_to_stablehlo(comp.as_serialized_hlo_module_proto()))
        attrs = m.operation.attributes
        attrs["mhlo.spmd_parameters_shardings"] = ir.ArrayAttr.get(
            [ir.StringAttr.get(str(s or rep)) for s in psh])
        attrs["mhlo.spmd_output_sharding"] = ir.StringAttr.get(str(out))
        return jmlir.module_to_bytecode(m)


def _compile(job, code, code_size, fmt, options, options_size):
    lib = load_library()
    try:
        text, info, proto = convert(ctypes.string_at(code, code_size), fmt.decode(),
                                    ctypes.string_at(options, options_size))
        if lib.tpusim_pjrt_compile_result(job, text.encode(), info.encode(), proto, len(proto)):
            lib.tpusim_pjrt_compile_error(job, b"out of memory")
    except BaseException as e:  # noqa: BLE001 - every failure goes back to JAX as a compile error
        lib.tpusim_pjrt_compile_error(job, ("%s: %s" % (type(e).__name__, e)).encode())


def register_converter():
    """Loads the plugin library and registers the program converter (once)."""
    global _callback
    if _callback is None:
        lib = load_library()
        _callback = _COMPILER_FN(_compile)
        lib.tpusim_pjrt_set_compiler(_callback)
        from . import host_callbacks
        host_callbacks.install(lib)


def requested():
    """Whether this process asked for tpusim: "tpusim" in JAX_PLATFORMS (or jax_platforms), or
    TPUSIM_PJRT=1. Otherwise the plugin stays out of the way: an installed tpusim must not
    take over every JAX program on the machine."""
    plats = os.environ.get("JAX_PLATFORMS", "")
    try:
        from jax._src import config

        plats = config.jax_platforms.value or plats
    except Exception:  # noqa: BLE001 - an older or newer JAX: the variable is enough
        pass
    return "tpusim" in [p.strip() for p in plats.split(",")] or os.environ.get("TPUSIM_PJRT") == "1"


def initialize():
    """Registers the plugin with JAX when this process asked for it (JAX calls this for every
    jax_plugins module). Below CPU in priority: with JAX_PLATFORMS=tpusim it is the only
    platform; with TPUSIM_PJRT=1, jax.devices("tpusim") lists the simulated chips."""
    if not requested():
        return
    path = library_path()
    if not os.path.exists(path):
        raise RuntimeError("tpusim PJRT plugin not found at %s: build it (cmake --build build) or set "
                           "TPUSIM_PJRT_LIBRARY" % path)
    register_converter()
    from jax._src import xla_bridge
    from jax._src.interpreters import mlir as jmlir

    # Donation (donate_argnums): JAX keeps the input_output_alias only for platforms it
    # lists; the plugin gives the donated buffers up (docs/pjrt.md).
    if "tpusim" not in jmlir._platforms_with_donation:
        jmlir._platforms_with_donation.append("tpusim")
    xla_bridge.register_plugin("tpusim", priority=-100, library_path=path, options=client_options())
    from . import lowering

    lowering.register()  # lower as for a TPU (lowering.py), once JAX knows the platform
