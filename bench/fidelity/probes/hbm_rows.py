"""hbm_rows.py [CHIPS] [KEEP_DIR] (session 26, gconv; needs libtpu, compile-only): the XLA TPU
compiler's copies that move the lanes' dimension between HBM arrays, off the corpora. Each case
is a transpose that moves the minor dimension (its result laid out row-major: a `copy` into the
transposed layout, HBM to HBM) or a max pool whose parameter the compiler lays out with W in the
lanes (C < 128) and copies into row-major for the window (maxpool3x3s2_32x112x112x64_bf16's
copy, on other shapes). One JSON line per case and chip: each entry copy/transpose moving the
lanes (operand and result shapes, memory spaces, estimated cycles), its rows of 128 lanes of
the two sides (copy_kind.c tpu__relayout_rows) and the compiler's cycles per row of a TensorCore
after the kernel start (kov; v5p two TensorCores), and tpusim's cycles for the same op, timing
the compiled program (`tpusim run`), at the commit that wrote them. data/hbm_rows.jsonl holds
the session-26 run (TPUSIM=/bin/false: the compiler's figures only). KEEP_DIR keeps the compiled programs."""
import json, math, os, re, subprocess, sys, tempfile
os.environ.setdefault("TPU_ACCELERATOR_TYPE", "v5litepod-4")
os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path = [p for p in sys.path if os.path.abspath(p or ".") != HERE]  # libtpu.py here is not libtpu
sys.path.insert(0, os.path.dirname(HERE))
import importlib.util
import gen, jax, jax.numpy as jnp
_spec = importlib.util.spec_from_file_location("hbm_rows_corpus", os.path.join(HERE, "hbm_rows_corpus.py"))
hc = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(hc)
BF, F32 = jnp.bfloat16, jnp.float32
TPUSIM = os.environ.get("TPUSIM", os.path.join(HERE, "..", "..", "..", "build", "tpusim"))
PRESET = {"v4": "v4:core"}


def pool(x):
    return jax.lax.reduce_window(x, -jnp.inf if x.dtype == F32 else jnp.array(-jnp.inf, x.dtype), jax.lax.max,
                                 (1, 3, 3, 1), (1, 2, 2, 1), ((0, 0), (0, 1), (0, 1), (0, 0)))


CASES = []
for shape, dt, perm in (((3000, 2048), F32, (1, 0)), ((6144, 3072), BF, (1, 0)), ((64, 512, 384), BF, (0, 2, 1)),
                        ((16, 200, 256), F32, (0, 2, 1)), ((24, 96, 48, 160), BF, (0, 3, 2, 1)),
                        ((40, 300, 640), BF, (1, 2, 0)), ((150, 170, 10, 3), jnp.int8, (1, 3, 2, 0)),
                        ((6, 48, 48, 512), F32, (0, 3, 1, 2)), ((8, 40, 40, 384), F32, (0, 2, 1, 3)),
                        ((4, 64, 40, 256), BF, (0, 3, 2, 1))):
    tag = "x".join(map(str, shape)) + "_p" + "".join(map(str, perm)) + {BF: "_bf16", F32: "_f32"}.get(dt, "_s8")
    CASES.append((f"transpose_{tag}", (lambda p: lambda x: jnp.transpose(x, p))(perm), [(shape, dt)]))
for shape, dt in (((16, 96, 96, 64), BF), ((8, 120, 120, 48), BF), ((8, 112, 112, 32), F32), ((24, 72, 72, 96), BF)):
    CASES.append((f"maxpool_{'x'.join(map(str, shape))}_{'bf16' if dt == BF else 'f32'}", pool, [(shape, dt)]))


def lane_copies(txt, gen_):
    ent = txt[txt.rfind("\nENTRY"):]
    shapes, out = {}, []
    for line in ent.splitlines()[1:]:
        m = re.match(r"\s*(?:ROOT )?%(\S+) = (\S+) (\S+?)\((.*)", line)
        if not m:
            continue
        name, shp, op, rest = m.groups()
        shapes[name] = shp
        e = re.search(r'"estimated_cycles":"(\d+)"', line)
        a = re.match(r"%([^,)\s]+)", rest)
        if op not in ("copy", "transpose") or not e or not a or a.group(1) not in shapes:
            continue
        r, o = hc.parse(shp), hc.parse(shapes[a.group(1)])
        mr, mo = hc.moving(r[0], r[1]), hc.moving(o[0], o[1])
        if not mr or not mo or mr[0] == mo[0]:
            continue
        rows = hc.rows(r[0], r[1]) + hc.rows(o[0], o[1])
        cyc = int(e.group(1))
        out.append(dict(op=name, src=shapes[a.group(1)], dst=shp, space=hc.space(o[2]) + ">" + hc.space(r[2]),
                        cycles=cyc, rows=rows, per_core_row=round((cyc - hc.KOV[gen_]) / (rows / hc.CORES[gen_]), 3)))
    return out


chips = sys.argv[1].split(",") if len(sys.argv) > 1 else ["v5p", "v4", "v6e", "v5e"]
keep = sys.argv[2] if len(sys.argv) > 2 else None
commit = subprocess.run(["git", "-C", HERE, "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
with tempfile.TemporaryDirectory() as d:
    only = os.environ.get("ONLY")
    for name, path, chip, txt in gen.compiled_cases(CASES, chips, d, lambda n: not only or any(o in n for o in only.split(","))):
        cp = os.path.join(keep or d, f"{name}.{chip}.hlo")
        open(cp, "w").write(txt)
        rep = os.path.join(d, "r.json")
        r = subprocess.run([TPUSIM, "run", cp, "--mode", "timing", "--chip", PRESET.get(chip, chip), "--report", rep,
                            "--quiet"], capture_output=True, text=True, env=dict(os.environ, TPUSIM_CACHE="off"))
        tops = {o["name"]: o["cycles"] for o in json.load(open(rep))["ops"]} if r.returncode == 0 else {}
        cps = lane_copies(txt, chip)
        for c in cps:
            c["tpusim"] = tops.get(c["op"])
        print(json.dumps(dict(case=name, chip=chip, copies=cps, compiler_total=sum(o[4] or 0 for o in gen.entry_ops(txt)),
                              tpusim_commit=commit)), flush=True)
