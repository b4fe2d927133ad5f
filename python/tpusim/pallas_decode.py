#!/usr/bin/env python3
"""pallas_decode.py: turns the Pallas/Mosaic kernels inside HLO text into a form tpusim's C
core reads, so that `tpusim run` and tpusim.run can run them.

    python3 pallas_decode.py IN.hlo OUT.hlo      # OUT.hlo: IN.hlo with each kernel decoded
    python3 pallas_decode.py --print IN.hlo      # the kernels as printed MLIR (to read)

JAX lowers a pallas_call for a TPU to custom_call_target="tpu_custom_call" whose
backend_config holds custom_call_config.body: the kernel as Mosaic MLIR bytecode, base64.
Only jaxlib can read that bytecode, and the C core must not depend on it, so this script
(the one place jaxlib is needed) parses it with jaxlib's registered tpu dialect and adds to
the same backend_config a key "tpusim_mosaic": the kernel in the line form docs/pallas.md
describes (one operation a line: name, results with types, operands, attributes, regions).
Each rewritten instruction stays on its line, so error locations still name IN.hlo's lines.
Needs jax with jaxlib (pip install jax); no TPU and no libtpu."""
import base64
import json
import re
import sys

FORMAT = "tpusim-mosaic 1"
_ids = {}


def _ident(v):
    """A module-wide number for an MLIR value (results and block arguments)."""
    k = v
    if k not in _ids:
        _ids[k] = len(_ids)
    return _ids[k]


_MEMSPACE = re.compile(r"#tpu\.memory_space<(\w+)>")


def _elem(t):
    s = str(t)
    if s == "!tpu.semaphore":
        return "sem"
    if s == "!tpu.dma_semaphore":
        return "dsem"
    if s.startswith("!"):
        return "?" + re.sub(r"\s+", "", s)
    return s


def enc_type(t):
    """i32 | f32 | index | v:DIMS:ELEM | m:DIMS:ELEM:SPACE | sem | dsem (DIMS: 8x128, empty for rank 0)."""
    from jax._src.lib.mlir import ir
    if isinstance(t, ir.VectorType) or str(t).startswith("vector<"):
        vt = ir.VectorType(t)
        return "v:%s:%s" % ("x".join(str(d) for d in vt.shape), _elem(vt.element_type))
    if str(t).startswith("memref<"):
        mt = ir.MemRefType(t)
        ms = mt.memory_space
        m = _MEMSPACE.search(str(ms)) if ms is not None else None
        shape = "x".join("?" if d < 0 else str(d) for d in mt.shape)
        return "m:%s:%s:%s" % (shape, _elem(mt.element_type), m.group(1) if m else "any")
    return _clean(_elem(t))


def _clean(s):
    return re.sub(r"\s+", "", s).replace("%", "%25")


def enc_attr(a):
    """One attribute as a token without spaces (docs/pallas.md)."""
    from jax._src.lib.mlir import ir
    import numpy as np
    n = type(a).__name__
    if n == "BoolAttr":
        return "i:%d" % int(a.value)
    if n == "IntegerAttr":
        return "i:%d" % a.value
    if n == "FloatAttr":
        return "f:%r" % float(a.value)
    if n in ("DenseFPElementsAttr", "DenseIntElementsAttr", "DenseElementsAttr"):
        if a.is_splat:
            v = a.get_splat_value()
            return "d:" + enc_attr(v)[2:]
        try:
            arr = np.array(a).reshape(-1)
            return "D:" + ",".join(repr(float(x)) if arr.dtype.kind == "f" else str(int(x)) for x in arr)
        except Exception:  # bf16 and other types numpy does not read: the printed values
            m = re.search(r"dense<(.*)>", str(a))
            return "D:" + re.sub(r"[\[\]\s]", "", m.group(1)) if m else "#" + _clean(str(a))
    if n.startswith("Dense") and n.endswith("ArrayAttr"):
        return "a:" + ",".join(str(int(x)) for x in a)
    if n == "StringAttr":
        return "s:" + a.value.replace("%", "%25").replace(" ", "%20")
    if n == "FlatSymbolRefAttr":
        return "@" + a.value
    if n == "TypeAttr":
        return "t:" + enc_type(a.value)
    if n == "UnitAttr":
        return "u"
    if n == "ArrayAttr":
        return "[" + ";".join(enc_attr(x) for x in a) + "]"
    if n == "DictAttr":
        return "{" + ";".join("%s=%s" % (a[i].name, enc_attr(a[i].attr)) for i in range(len(a))) + "}"
    return "#" + _clean(str(a)).lstrip("#")


_LOC = re.compile(r'"([^"]+)":(\d+):(\d+)')


def _loc(op):
    """file:line of the user's source the operation came from (the last frame Pallas kept)."""
    m = _LOC.findall(str(op.location))
    if not m:
        return None
    f, line, _ = m[0]
    return "%s:%s" % (f.replace("%", "%25").replace(" ", "%20"), line)


def enc_op(op, out, depth):
    o = op.operation
    parts = ["op", o.name, str(len(o.results))]
    for r in o.results:
        parts += ["%d" % _ident(r), enc_type(r.type)]
    parts.append(str(len(o.operands)))
    parts += ["%d" % _ident(v) for v in o.operands]
    attrs = o.attributes
    # (a function's type is its block's argument types and its return's operands)
    named = [(attrs[i].name, enc_attr(attrs[i].attr)) for i in range(len(attrs)) if attrs[i].name != "function_type"]
    loc = _loc(o)
    if loc:
        named.append(("_loc", "s:" + loc))
    parts.append(str(len(named)))
    parts += ["%s=%s" % kv for kv in named]
    parts.append(str(len(o.regions)))
    out.append(" " * depth + " ".join(parts))
    for reg in o.regions:
        blocks = list(reg.blocks)
        if len(blocks) != 1:
            raise ValueError("%s: a region of %d blocks (tpusim reads one block a region)" % (o.name, len(blocks)))
        b = blocks[0]
        bl = ["block", str(len(b.arguments))]
        for a in b.arguments:
            bl += ["%d" % _ident(a), enc_type(a.type)]
        out.append(" " * (depth + 1) + " ".join(bl))
        for inner in b.operations:
            enc_op(inner, out, depth + 2)
        out.append(" " * (depth + 1) + "end")


def _parse_body(body_b64):
    from jax._src.interpreters import mlir
    from jax._src.lib import tpu
    from jax._src.lib.mlir import ir, passmanager
    ctx = mlir.make_ir_context()
    tpu.register_dialect(ctx)
    ctx.allow_unregistered_dialects = True
    body = base64.b64decode(body_b64)
    ctx.__enter__()
    mod = ir.Module.parse(body)
    # The bytecode is the "stable_mosaic" serialized form: back to the tpu dialect.
    passmanager.PassManager.parse("builtin.module(mosaic-serde{serialize=false})").run(mod.operation)
    ctx.allow_unregistered_dialects = False
    return ctx, mod


def decode_body(body_b64):
    """The kernel of one tpu_custom_call body (base64 Mosaic bytecode) in the line form."""
    ctx, mod = _parse_body(body_b64)
    try:
        _ids.clear()
        out = [FORMAT]
        for op in mod.body.operations:
            enc_op(op, out, 0)
        return "\n".join(out) + "\n"
    finally:
        ctx.__exit__(None, None, None)


def print_body(body_b64):
    ctx, mod = _parse_body(body_b64)
    try:
        return str(mod)
    finally:
        ctx.__exit__(None, None, None)


def decode_hlo(text, print_only=False):
    """HLO text with "tpusim_mosaic" added to each tpu_custom_call's backend_config. The
    config may span lines (JAX prints cost_estimate over several): the rewritten config keeps
    as many line breaks, so every later line keeps its number."""
    shown, pos = [], 0
    dec = json.JSONDecoder()
    while True:
        t = text.find('custom_call_target="tpu_custom_call"', pos)
        if t < 0:
            break
        b = text.find("backend_config={", t)
        if b < 0:
            break
        start = b + len("backend_config=")
        obj, end = dec.raw_decode(text, start)
        pos = end
        cc = obj.get("custom_call_config", {}) if isinstance(obj, dict) else {}
        if not isinstance(obj, dict) or "tpusim_mosaic" in obj or "body" not in cc:
            continue
        if print_only:
            shown.append(print_body(cc["body"]))
            continue
        obj["tpusim_mosaic"] = decode_body(cc["body"])
        js = json.dumps(obj, separators=(",", ":"))
        js = js[:-1] + "\n" * text.count("\n", start, end) + "}"
        text = text[:start] + js + text[end:]
        pos = start + len(js)
    return "\n".join(shown) if print_only else text


def main(argv):
    if len(argv) == 2 and argv[0] == "--print":
        sys.stdout.write(decode_hlo(open(argv[1]).read(), print_only=True) + "\n")
        return 0
    if len(argv) != 2:
        sys.stderr.write("usage: pallas_decode.py IN.hlo OUT.hlo | --print IN.hlo\n")
        return 2
    try:
        import jax  # noqa: F401
        from jax._src.lib import tpu  # noqa: F401
    except Exception as e:  # the one line the CLI shows
        sys.stderr.write("decoding a Pallas kernel needs jax with jaxlib (pip install jax): %s\n" % e)
        return 3
    text = open(argv[0]).read()
    res = decode_hlo(text)
    with open(argv[1], "w") as f:
        f.write(res)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
