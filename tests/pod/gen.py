#!/usr/bin/env python3
"""gen.py: the pod fixture corpus — sharded JAX programs as XLA partitions them for CPU.

Pinned: jax 0.10.2, jaxlib 0.10.2, flax 0.12.8, optax 0.2.8, numpy 2.x, CPU backend.
Run by hand:  XLA_FLAGS=--xla_force_host_platform_device_count=8 python3 tests/pod/gen.py [NAME ...]
(the script sets that flag itself when it is missing; with names it redoes only those cases).

Each case in tests/pod/cases/NAME/ holds
    prog.hlo          JAX's lowered, unpartitioned program (global shapes; Shardy annotations,
                      JAX's default: xla.sdy.* custom calls and #sdy.sharding attributes)
    prog_gspmd.hlo    the same lowered with jax_use_shardy_partitioner=False (GSPMD form:
                      sharding={...} attributes, custom-call "Sharding", SPMDFullToShardShape)
    opt.hlo           XLA's partitioned, optimized program (num_partitions=N or replica_count=N,
                      per-device shapes, collectives, sharding= on the entry parameters)
    in0.npy ...       global inputs (bf16 stored as float32), the entry parameters in order
    out0.npy ...      JAX's global results of the sharded run (bf16 as float32)
    unsharded_out*.npy  the same function run without shardings (one device) or, for programs
                      that only exist sharded (shard_map, pmap, replica programs), a numpy
                      reference of the collectives' semantics
    dev/D/inK.npy, dev/D/outK.npy  device D's shard of input/result K (D = device id)
    source.hlo        (replica_* cases only) the HLO text written by gen.py that XLA compiled
    shardings         the results' HLO shardings, one per line (XLA's text omits them)
    meta.json         mesh, device order, specs and HLO shardings, tolerance, the collectives
                      and replica-group forms in opt.hlo, the XLA re-run of opt.hlo
Before anything is written: the sharded results equal the unsharded ones within the case's
tolerance (0: bit-identical), and opt.hlo, parsed back from its text and compiled by XLA with
num_partitions / num_replicas set, reproduces every device's results from the dev/ inputs.
"""
import json, os, re, shutil, sys
if "xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8").strip()
os.environ.setdefault("JAX_PLATFORMS", "cpu")
import jax, jax.numpy as jnp, numpy as np
import jaxlib
from jax.sharding import Mesh, PartitionSpec as P, NamedSharding as NS
from jax import shard_map
from jax._src.lib import hlo as xhlo, xla_client as xc

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "cases")
DEV = np.array(jax.devices())
assert len(DEV) == 8, "needs 8 CPU devices (XLA_FLAGS=--xla_force_host_platform_device_count=8)"
M8 = Mesh(DEV.reshape(8), ("d",))
M24 = Mesh(DEV.reshape(2, 4), ("x", "y"))
M42 = Mesh(DEV.reshape(4, 2), ("x", "y"))
M4 = Mesh(DEV[:4].reshape(4), ("d",))
M2 = Mesh(DEV[:2].reshape(2), ("d",))
M22 = Mesh(DEV[:4].reshape(2, 2), ("x", "y"))
MT = Mesh(DEV.reshape(2, 4).T, ("x", "y"))  # 4x2, devices not in id order: partition p runs on device MT.flat[p]
rng = np.random.RandomState(0)
ONLY = set(sys.argv[1:])
SUMMARY = []
COLL = r"all-reduce|all-gather|reduce-scatter|all-to-all|collective-permute|collective-broadcast|ragged-all-to-all"
COLL_RE = re.compile(r"[\]})]\s+((?:" + COLL + r")(?:-start|-done)?|partition-id|replica-id)\(")


def arr(*shape, dtype=np.float32, scale=1.0):
    if np.issubdtype(dtype, np.integer):
        return rng.randint(-20, 20, size=shape).astype(dtype)
    return (rng.randn(*shape) * scale).astype(dtype)


def f32(a):
    a = np.asarray(a)
    return a.astype(np.float32) if a.dtype.name in ("bfloat16", "float16") else a


def hlo_strip_shardings(txt):
    """opt.hlo without its sharding={...} attributes (XLA would read them as global shardings
    of the per-device shapes and partition again)."""
    out, i = [], 0
    while True:
        j = txt.find(", sharding={", i)
        if j < 0:
            out.append(txt[i:])
            return "".join(out)
        out.append(txt[i:j])
        k, depth = j + len(", sharding="), 0
        while True:
            depth += {"{": 1, "}": -1}.get(txt[k], 0)
            k += 1
            if depth == 0:
                break
        i = k


GROUPS_RE = re.compile(r"replica_groups=(mesh\[[^\]]*\](?:, device_ids=\((?:[^()]|\([^()]*\))*\))? \{[^}]*\}|"
                       r"\[[\d,]*\]<=\[[\d,]*\](?:T\([\d,]*\))?|\{(?:\{[\d,]*\},?)*\})")


def iota(dims, perm, shape=None):
    """XLA's iota tile assignment [dims]T(perm), flattened."""
    a = np.arange(int(np.prod(dims))).reshape(dims)
    return (a.transpose(perm) if perm else a).reshape(-1)


def mesh_groups(g):
    """The explicit groups of a mesh-axes replica_groups form:
    mesh['a'=2,'b'=4] {'a'}  or  mesh[...], device_ids=([2,4]T(1,0)) {'b'}:
    devices laid out over the mesh (iota, or device_ids), one group per combination of the
    axes not named, ordered along the named axes."""
    m = re.match(r"mesh\[([^\]]*)\](?:, device_ids=\(\[([\d,]*)\](?:T\(([\d,]*)\))?\))? \{([^}]*)\}", g)
    axes = [(n, int(v)) for n, v in re.findall(r"'(\w+)'=(\d+)", m.group(1))]
    shape = [v for _, v in axes]
    ids = (iota([int(v) for v in m.group(2).split(",")], [int(v) for v in m.group(3).split(",")] if m.group(3) else None)
           if m.group(2) else np.arange(int(np.prod(shape)))).reshape(shape)
    named = [i for i, (n, _) in enumerate(axes) if f"'{n}'" in m.group(4)]
    rest = [i for i in range(len(axes)) if i not in named]
    t = ids.transpose(rest + named).reshape(-1, int(np.prod([shape[i] for i in named])))
    return "{" + ",".join("{" + ",".join(str(v) for v in row) + "}" for row in t) + "}"


def collectives(opt):
    """Opcode counts (collectives, partition-id, replica-id) and replica-group forms in opt.hlo."""
    ops = {}
    for op in COLL_RE.findall(opt):
        ops[op] = ops.get(op, 0) + 1
    forms = {}
    for g in GROUPS_RE.findall(opt):
        k = ("mesh_device_ids" if g.startswith("mesh") and "device_ids" in g else "mesh" if g.startswith("mesh") else "iota_transposed" if g.startswith("[") and "T(" in g
             else "iota" if g.startswith("[") else "empty" if g == "{}" else "explicit")
        forms[k] = forms.get(k, 0) + 1
    n_pairs = len(re.findall(r"source_target_pairs=", opt))
    if n_pairs:
        forms["source_target_pairs"] = n_pairs
    groups = sorted(set(GROUPS_RE.findall(opt)))
    return dict(sorted(ops.items())), forms, groups


def split_top(t):
    """Splits a comma-separated list at depth 0 of ()[]{}."""
    out, depth, cur = [], 0, ""
    for ch in t:
        depth += ch in "([{"
        depth -= ch in ")]}"
        if ch == "," and depth == 0:
            out.append(cur.strip())
            cur = ""
        else:
            cur += ch
    return out + [cur.strip()] if cur.strip() else out


def split_variadic_all_reduce(txt):
    """A variadic all-reduce (x, y, ...) becomes one all-reduce per operand and a tuple of them
    (XLA's partitioner takes single-operand all-reduces only); new channel ids from 1000."""
    out, ch = [], [1000]
    for ln in txt.split("\n"):
        m = re.match(r"(\s*)(ROOT )?(%[\w.-]+) = \((.*?)\) all-reduce\(([^)]*)\), (.*)$", ln)
        if not m:
            out.append(ln)
            continue
        ind, root, name, types, ops, rest = m.groups()
        types, ops, parts = split_top(types), split_top(ops), []
        for i, (t, o) in enumerate(zip(types, ops)):
            ch[0] += 1
            out.append(f"{ind}{name}.part{i} = {t} all-reduce({o}), " + re.sub(r"channel_id=\d+", f"channel_id={ch[0]}", rest))
            parts.append(f"{name}.part{i}")
        out.append(f"{ind}{root or ''}{name} = ({', '.join(types)}) tuple({', '.join(parts)})")
    return "\n".join(out)


def xla_rerun(opt, dev_ins, dev_outs, partitions, replicas, devices, tol):
    """xla_rerun_as as N partitions; where XLA's partitioner refuses the program, as N replicas."""
    try:
        return xla_rerun_as(opt, dev_ins, dev_outs, partitions, replicas, devices, tol, False)
    except jax.errors.JaxRuntimeError as e:
        if partitions == 1:
            raise
        print(f"  (as partitions: {str(e).splitlines()[0][:150]})")
        return xla_rerun_as(opt, dev_ins, dev_outs, partitions, replicas, devices, tol, True)


def xla_rerun_as(opt, dev_ins, dev_outs, partitions, replicas, devices, tol, as_replicas):
    """Parses opt.hlo's text, compiles it with XLA for `devices` (partition/replica order)
    and runs it on every device's inputs: returns (how, the largest difference to dev_outs)."""
    # bitcast between shapes (default layouts) is a reshape; the HLO -> StableHLO import
    # mistakes its layout, so it is spelled reshape here (a wrong guess shows in the check);
    # a fusion is imported without its layouts (XLA's CPU compiler then aborts on a
    # transpose in it): each fusion is spelled as a call of its computation, which XLA inlines
    # and fuses again
    txt = re.sub(r"\bbitcast\(", "reshape(", hlo_strip_shardings(opt))
    txt = re.sub(r" fusion\((.*?)\), kind=k\w+, calls=", r" call(\1), to_apply=", txt)
    # replica_groups in XLA's mesh-axes form are written out as explicit groups (the HLO ->
    # StableHLO import drops the named axes: a wrong expansion shows in the check)
    txt = re.sub(r"replica_groups=(mesh\[[^\]]*\](?:, device_ids=\((?:[^()]|\([^()]*\))*\))? \{[^}]*\})",
                 lambda mm: "replica_groups=" + mesh_groups(mm.group(1)), txt)
    txt = split_variadic_all_reduce(txt)
    how = "replicas" if replicas > 1 else "partitions"
    if partitions > 1 and ("partition-id()" in txt or as_replicas):
        # XLA's partitioner refuses partition-id (and variadic all-reduces) in a program it is
        # asked to partition again: the program runs as N replicas of one partition instead,
        # with the same meaning —
        # partition-id -> replica-id; flattened ids (use_global_device_ids) are replica ids
        # when there is one partition; channel_id dropped where it makes a collective
        # cross-partition (collective-permute, all-to-all without flattened ids)
        assert replicas == 1
        txt = txt.replace("partition-id()", "replica-id()")
        lines = []
        for ln in txt.split("\n"):
            if re.search(r"\b(collective-permute|all-to-all|all-reduce|all-gather|reduce-scatter)(-start)?\(", ln) \
                    and "use_global_device_ids=true" not in ln:
                g = re.search(r"replica_groups=(\S+?)(?:,\s|$)", ln)
                assert "all-reduce" not in ln or (g and g.group(1) == "{}") or "collective-permute" in ln, ln
                ln = re.sub(r", channel_id=\d+", "", ln)
            lines.append(ln)
        txt = "\n".join(lines).replace(f"num_partitions={partitions}", f"replica_count={partitions}")
        partitions, replicas, how = 1, partitions, "replicas (partition-id read as replica-id)"
    mod = xhlo.hlo_module_from_text(txt)
    proto = mod.as_serialized_hlo_module_proto()
    pshapes = xhlo.XlaComputation(proto).program_shape().parameter_shapes()
    opts = xc.CompileOptions()
    eb = opts.executable_build_options
    eb.num_partitions, eb.num_replicas = partitions, replicas
    eb.use_spmd_partitioning = partitions > 1
    eb.device_assignment = xc.DeviceAssignment.create(np.array(devices).reshape(replicas, partitions))
    devs = [jax.devices()[i] for i in devices]
    exe = devs[0].client.compile_and_load(xc._xla.mlir.hlo_to_stablehlo(proto), xc.DeviceList(tuple(devs)), opts)
    flat = Mesh(np.array(devs), ("all",))
    args = []
    for k, ps in enumerate(pshapes):  # one array per parameter holding every device's own block
        blocks = [jax.device_put(np.asarray(dev_ins[dv.id][k]).reshape(ps.dimensions()).astype(ps.numpy_dtype()), dv)
                  for dv in devs]
        args.append(jax.make_array_from_single_device_arrays(blocks[0].shape, NS(flat, P()), blocks))
    res = exe.execute_sharded(args).disassemble_into_single_device_arrays()
    worst = 0.0
    for k, per_dev in enumerate(res):
        for got in per_dev:
            dv, = got.devices()
            want = np.asarray(dev_outs[dv.id][k], np.float64)
            g = f32(np.asarray(got)).astype(np.float64).reshape(want.shape)
            worst = max(worst, float(np.max(np.abs(g - want))) if g.size else 0.0)
    assert worst <= tol, f"XLA re-run of opt.hlo differs by {worst}"
    return how, worst


def write_case(name, d_meta, prog, prog_gspmd, opt, ins, outs, unsharded, dev_ins, dev_outs, out_shardings):
    d = os.path.join(OUT, name)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    if prog is not None:
        open(os.path.join(d, "prog.hlo"), "w").write(prog)
    if prog_gspmd is not None:
        open(os.path.join(d, "prog_gspmd.hlo"), "w").write(prog_gspmd)
    open(os.path.join(d, "opt.hlo"), "w").write(opt)
    for i, a in enumerate(ins):
        np.save(os.path.join(d, f"in{i}.npy"), f32(a))
    for i, a in enumerate(outs):
        np.save(os.path.join(d, f"out{i}.npy"), f32(a))
    for i, a in enumerate(unsharded or []):
        np.save(os.path.join(d, f"unsharded_out{i}.npy"), f32(a))
    for dv in sorted(dev_ins):
        dd = os.path.join(d, "dev", str(dv))
        os.makedirs(dd)
        for k, a in enumerate(dev_ins[dv]):
            np.save(os.path.join(dd, f"in{k}.npy"), f32(a))
        for k, a in enumerate(dev_outs[dv]):
            np.save(os.path.join(dd, f"out{k}.npy"), f32(a))
    with open(os.path.join(d, "shardings"), "w") as fh:
        for s in out_shardings:
            fh.write(s + "\n")
    ops, forms, groups = collectives(opt)
    d_meta.update({"collectives": sorted(set(o.replace("-start", "").replace("-done", "") for o in ops
                                             if o not in ("partition-id", "replica-id"))),
                   "opcodes": ops, "async": any(o.endswith("-start") for o in ops),
                   "replica_group_forms": sorted(forms), "replica_group_form_counts": forms,
                   "replica_groups": groups, "jax": jax.__version__, "jaxlib": jaxlib.__version__})
    json.dump(d_meta, open(os.path.join(d, "meta.json"), "w"), indent=1)
    size = sum(os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk(d) for f in fs)
    SUMMARY.append((name, d_meta, size))
    print(f"{name}: {ops} {forms} {size} bytes, unsharded diff {d_meta.get('unsharded_max_abs_diff')}, "
          f"xla re-run {d_meta['xla_rerun']}")


def check_close(got, want, tol, what):
    worst = 0.0
    for a, b in zip(got, want):
        a, b = f32(a).astype(np.float64), f32(b).astype(np.float64)
        assert a.shape == b.shape, f"{what}: shape {a.shape} vs {b.shape}"
        if tol == 0:
            assert np.array_equal(a, b), f"{what}: not bit-identical"
        else:
            np.testing.assert_allclose(a, b, rtol=tol, atol=tol, err_msg=what)
        worst = max(worst, float(np.max(np.abs(a - b))) if a.size else 0.0)
    return worst


def shard_lists(leaves, devices):
    """{device id: [leaf k's shard on that device]} for the devices of a mesh."""
    per = {int(dv.id): [] for dv in devices}
    for a in leaves:
        got = {s.device.id: np.asarray(s.data) for s in a.addressable_shards}
        for dv in per:
            per[dv].append(got[dv])
    return per


def case(name, f, args, in_specs, mesh, tol=1e-5, out_specs=None, ref=None, note=""):
    """A jitted program over `mesh`. ref: a numpy reference (for programs that only exist
    sharded: shard_map); else the function itself jitted on one device is the reference."""
    if ONLY and name not in ONLY:
        return
    is_spec = lambda x: isinstance(x, P)
    shard = jax.tree.map(lambda s: NS(mesh, s), tuple(in_specs), is_leaf=is_spec)
    kw = {"in_shardings": shard}
    if out_specs is not None:
        kw["out_shardings"] = jax.tree.map(lambda s: NS(mesh, s), out_specs, is_leaf=is_spec)
    jf = jax.jit(f, **kw)
    lo = jf.lower(*args)
    c = lo.compile()
    opt = c.as_text()
    prog = lo.as_text(dialect="hlo")
    jax.config.update("jax_use_shardy_partitioner", False)
    try:
        prog_gspmd = jax.jit(f, **kw).lower(*args).as_text(dialect="hlo")
    finally:
        jax.config.update("jax_use_shardy_partitioner", True)
    assert "sdy" not in prog_gspmd
    dargs = jax.device_put(tuple(args), shard)
    res = jf(*dargs)
    outs = jax.tree.leaves(res)
    in_leaves = jax.tree.leaves(dargs)
    if ref is not None:
        unsharded = [np.asarray(r) for r in jax.tree.leaves(ref(*jax.tree.map(np.asarray, args)))]
        how = "numpy reference of the collectives' semantics"
    else:
        with jax.default_device(DEV[0]):
            unsharded = [np.asarray(r) for r in jax.tree.leaves(jax.jit(f)(*jax.tree.map(np.asarray, args)))]
        how = "the same function jitted on one device (no shardings)"
    diff = check_close(outs, unsharded, tol, name + " sharded vs unsharded")
    order = [int(dv.id) for dv in c.runtime_executable().local_devices()]
    assert order == [int(dv.id) for dv in mesh.devices.flat]
    dev_ins, dev_outs = shard_lists(in_leaves, mesh.devices.flat), shard_lists(outs, mesh.devices.flat)
    in_sh = [s._to_xla_hlo_sharding(np.ndim(a)) for s, a in zip(jax.tree.leaves(c.input_shardings[0]), in_leaves)]
    out_sh = [s._to_xla_hlo_sharding(np.ndim(a)) for s, a in zip(jax.tree.leaves(c.output_shardings), outs)]
    n = mesh.devices.size
    rerun = xla_rerun(opt, dev_ins, dev_outs, n, 1, order, tol)
    io = lambda leaves, sh: [{"shape": list(np.shape(a)), "dtype": str(a.dtype), "spec": str(a.sharding.spec),
                              "hlo_sharding": str(h), "local_shape": list(a.addressable_shards[0].data.shape)}
                             for a, h in zip(leaves, sh)]
    meta = {"note": note, "mesh": dict(zip(mesh.axis_names, mesh.devices.shape)),
            "mesh_shape": list(mesh.devices.shape), "axis_names": list(mesh.axis_names),
            "mesh_devices": np.vectorize(lambda dv: dv.id)(mesh.devices).tolist(), "devices": int(n),
            "num_partitions": int(n), "num_replicas": 1, "device_assignment": order,
            "inputs": io(in_leaves, in_sh), "outputs": io(outs, out_sh), "rtol": tol, "atol": tol,
            "unsharded": True, "unsharded_how": how, "unsharded_max_abs_diff": diff,
            "xla_rerun": {"ok": True, "how": rerun[0], "max_abs_diff": rerun[1]}}
    write_case(name, meta, prog, prog_gspmd, opt, [np.asarray(a) for a in jax.tree.leaves(args)], outs, unsharded,
               dev_ins, dev_outs, [str(s) for s in out_sh])


def pmap_case(name, f, x, ref, n=8, note=""):
    """jax.pmap over n devices (in this jax pmap lowers to a shard_map: num_partitions=n)."""
    if ONLY and name not in ONLY:
        return
    pm = jax.pmap(f, axis_name="i", devices=list(DEV[:n]))
    c = pm.lower(x).compile()
    opt = c.as_text()
    res = pm(x)
    outs = [np.asarray(o) for o in jax.tree.leaves(res)]
    unsharded = [np.asarray(r) for r in jax.tree.leaves(ref(np.asarray(x)))]
    diff = check_close(outs, unsharded, 1e-5, name)
    order = [int(dv.id) for dv in c.runtime_executable().local_devices()]
    dev_ins = {d: [x[i]] for i, d in enumerate(order)}
    dev_outs = {d: [o[i] for o in outs] for i, d in enumerate(order)}
    rerun = xla_rerun(opt, dev_ins, dev_outs, n, 1, order, 1e-5)
    meta = {"note": note, "mesh": {"i": n}, "mesh_shape": [n], "axis_names": ["i"], "mesh_devices": order,
            "devices": n, "num_partitions": n, "num_replicas": 1, "device_assignment": order, "pmap": True,
            "inputs": [{"shape": list(x.shape), "dtype": str(x.dtype), "spec": "pmap: leading axis, one row per device",
                        "hlo_sharding": f"{{devices=[{n},1]<=[{n}]}}", "local_shape": [1] + list(x.shape[1:])}],
            "outputs": [{"shape": list(o.shape), "dtype": str(o.dtype), "spec": "pmap: leading axis, one row per device",
                         "hlo_sharding": f"{{devices=[{n}{',1' * (o.ndim - 1)}]<=[{n}]}}",
                         "local_shape": [1] + list(o.shape[1:])} for o in outs],
            "rtol": 1e-5, "atol": 1e-5, "unsharded": True, "unsharded_how": "numpy reference of the collectives' semantics",
            "unsharded_max_abs_diff": diff, "xla_rerun": {"ok": True, "how": rerun[0], "max_abs_diff": rerun[1]}}
    write_case(name, meta, None, None, opt, [x], outs, unsharded, dev_ins, dev_outs,
               [m["hlo_sharding"] for m in meta["outputs"]])


def replica_case(name, hlo, x, ref, n, note=""):
    """A cross-replica program (replica_count=n, the form jax.pmap had before it became a
    shard_map): HLO written here, compiled by XLA with num_replicas=n; opt.hlo is XLA's text.
    Inputs and results are stacked on a leading axis, one row per replica (device)."""
    if ONLY and name not in ONLY:
        return
    mod = xhlo.hlo_module_from_text(hlo)
    proto = mod.as_serialized_hlo_module_proto()
    opts = xc.CompileOptions()
    eb = opts.executable_build_options
    eb.num_partitions, eb.num_replicas, eb.use_spmd_partitioning = 1, n, False
    eb.device_assignment = xc.DeviceAssignment.create(np.arange(n).reshape(n, 1))
    devs = list(DEV[:n])
    exe = devs[0].client.compile_and_load(xc._xla.mlir.hlo_to_stablehlo(proto), xc.DeviceList(tuple(devs)), opts)
    opt = exe.hlo_modules()[0].to_string()
    assert f"replica_count={n}" in opt
    flat = Mesh(np.array(devs), ("all",))
    a = jax.make_array_from_single_device_arrays(x.shape[1:], NS(flat, P()), [jax.device_put(x[i], dv) for i, dv in enumerate(devs)])
    res = exe.execute_sharded([a]).disassemble_into_single_device_arrays()
    outs = [np.stack([np.asarray(r) for r in per_dev]) for per_dev in res]
    unsharded = [np.asarray(r) for r in ref(x)]
    diff = check_close(outs, unsharded, 1e-5, name)
    order = list(range(n))
    dev_ins = {d: [x[d]] for d in order}
    dev_outs = {d: [o[d] for o in outs] for d in order}
    rerun = xla_rerun(opt, dev_ins, dev_outs, 1, n, order, 0)
    meta = {"note": note, "mesh": {"replica": n}, "mesh_shape": [n], "axis_names": ["replica"], "mesh_devices": order,
            "devices": n, "num_partitions": 1, "num_replicas": n, "device_assignment": order, "replicas": True,
            "inputs": [{"shape": list(x.shape), "dtype": str(x.dtype), "spec": "stacked: one row per replica",
                        "hlo_sharding": None, "local_shape": list(x.shape[1:])}],
            "outputs": [{"shape": list(o.shape), "dtype": str(o.dtype), "spec": "stacked: one row per replica",
                         "hlo_sharding": None, "local_shape": list(o.shape[1:])} for o in outs],
            "rtol": 1e-5, "atol": 1e-5, "unsharded": True, "unsharded_how": "numpy reference of the collectives' semantics",
            "unsharded_max_abs_diff": diff, "xla_rerun": {"ok": True, "how": rerun[0], "max_abs_diff": rerun[1]}}
    write_case(name, meta, None, None, opt, [x], outs, unsharded, dev_ins, dev_outs, [])
    open(os.path.join(OUT, name, "source.hlo"), "w").write(hlo)  # the HLO written here, before XLA


def smap(f, mesh, i, o):
    return shard_map(f, mesh=mesh, in_specs=i, out_specs=o, check_vma=False)


def smap_part(f, mesh, i, o, manual):
    """shard_map manual over the axes `manual` only; the others stay automatic."""
    return shard_map(f, mesh=mesh, in_specs=i, out_specs=o, axis_names=set(manual), check_vma=False)


def blocks(a, n, axis=0):
    return np.split(a, n, axis=axis)


def main():
    x64 = arr(16, 64)
    w = arr(64, 32, scale=0.2)
    case("psum_x", smap(lambda a: jax.lax.psum(a, "x"), M24, P("x", "y"), P(None, "y")), (arr(8, 16),), [P("x", "y")], M24,
         ref=lambda a: a[:4] + a[4:], note="shard_map psum over one axis of a 2x4 mesh")
    case("psum_xy", smap(lambda a: jax.lax.psum(a, ("x", "y")), M24, P("x", "y"), P()), (arr(8, 16),), [P("x", "y")], M24,
         ref=lambda a: a.reshape(2, 4, 4, 4).sum((0, 2)), note="shard_map psum over both axes")
    case("pmean_d", smap(lambda a: jax.lax.pmean(a, "d"), M8, P("d"), P()), (arr(16, 4),), [P("d")], M8,
         ref=lambda a: a.reshape(8, 2, 4).mean(0), note="pmean")
    case("pmax_d", smap(lambda a: jax.lax.pmax(a, "d"), M8, P("d"), P()), (arr(16, 4),), [P("d")], M8,
         ref=lambda a: a.reshape(8, 2, 4).max(0), note="pmax (max all-reduce)")
    case("psum_int", smap(lambda a: jax.lax.psum(a, "d"), M8, P("d"), P()), (arr(16, 4, dtype=np.int32),), [P("d")], M8,
         tol=0, ref=lambda a: a.reshape(8, 2, 4).sum(0, dtype=np.int32), note="integer psum, bit exact")
    case("psum_bf16", smap(lambda a: jax.lax.psum(a, "d"), M4, P("d"), P()),
         (jnp.asarray(arr(8, 8), jnp.bfloat16),), [P("d")], M4, tol=1e-2,
         ref=lambda a: a.astype(np.float32).reshape(4, 2, 8).sum(0).astype(jnp.bfloat16), note="bf16 psum over 4 devices")
    case("all_gather_tiled", smap(lambda a: jax.lax.all_gather(a, "d", tiled=True), M8, P("d"), P()),
         (arr(16, 4),), [P("d")], M8, ref=lambda a: a, note="all_gather tiled")
    case("all_gather_stack", smap(lambda a: jax.lax.all_gather(a, "y"), M24, P("x", "y"), P("x")), (arr(4, 8),),
         [P("x", "y")], M24, ref=lambda a: a.reshape(2, 2, 4, 2).transpose(0, 2, 1, 3).reshape(8, 2, 2),
         note="all_gather untiled (stacked) over the 4-axis of a 2x4 mesh")
    case("psum_scatter", smap(lambda a: jax.lax.psum_scatter(a, "d", tiled=True), M8, P(), P("d")), (arr(16, 4),), [P()], M8,
         ref=lambda a: 8 * a, note="psum_scatter tiled (reduce-scatter)")
    case("all_to_all", smap(lambda a: jax.lax.all_to_all(a, "d", 0, 1, tiled=True), M4, P(None, "d"), P("d", None)),
         (arr(8, 8),), [P(None, "d")], M4, ref=lambda a: a, note="all_to_all split 0 concat 1")
    case("ppermute_ring", smap(lambda a: jax.lax.ppermute(a, "d", [(i, (i + 1) % 8) for i in range(8)]), M8, P("d"), P("d")),
         (arr(16, 4),), [P("d")], M8, ref=lambda a: np.roll(a, 2, 0), note="ppermute ring shift")
    case("ppermute_shift", smap(lambda a: jax.lax.ppermute(a, "d", [(i, i + 1) for i in range(3)]), M4, P("d"), P("d")),
         (arr(8, 4),), [P("d")], M4, ref=lambda a: np.concatenate([np.zeros_like(a[:2]), a[:6]]),
         note="ppermute non-cyclic shift: device 0 receives nothing (zeros)")
    case("axis_index", smap(lambda a: a + jax.lax.axis_index("d").astype(a.dtype), M8, P("d"), P("d")), (arr(8, 2),),
         [P("d")], M8, ref=lambda a: a + np.arange(8, dtype=np.float32)[:, None], note="axis_index (partition-id)")
    case("sum_sharded", lambda a: jnp.sum(a, axis=0), (x64,), [P("x", "y")], M24, note="jnp.sum of a sharded array")
    case("reshard", lambda a: a * 2, (arr(8, 8),), [P("x", None)], M24, out_specs=P(None, "y"),
         note="reshard P(x,None) -> P(None,y)")
    case("dp_matmul", lambda a, b: jnp.tanh(a @ b), (x64, w), [P(("x", "y"), None), P()], M24,
         note="replicated params, batch sharded over both axes")
    case("megatron", lambda a, b1, b2: jnp.tanh(a @ b1) @ b2, (x64, arr(64, 128, scale=0.1), arr(128, 64, scale=0.1)),
         [P(), P(None, "y"), P("y", None)], M24, note="Megatron MLP: column then row parallel")

    def loss(p, a, y):
        h = jax.nn.relu(a @ p[0])
        return jnp.mean((h @ p[1] - y) ** 2)

    def sgd(p, a, y):
        l, g = jax.value_and_grad(loss)(p, a, y)
        return l, [pi - 0.1 * gi for pi, gi in zip(p, g)]

    params = [arr(64, 32, scale=0.2), arr(32, 8, scale=0.2)]
    y = arr(16, 8)
    case("dp_sgd_step", sgd, (params, x64, y), [P(), P("d"), P("d")], M8, note="data-parallel MLP SGD step")
    case("fsdp_step", sgd, (params, x64, y), [[P("d", None), P("d", None)], P("d"), P("d")], M8,
         note="FSDP by shardings: params and batch split over d")
    case("dp_tp_step", sgd, (params, x64, y), [[P(None, "y"), P("y", None)], P("x"), P("x")], M24,
         note="data x tensor parallel SGD step")
    case("fsdp_42", sgd, (params, x64, y), [[P("x", "y"), P("y", None)], P("x"), P("x")], M42, note="FSDP-ish on a 4x2 mesh")

    def attn(q, k, v):
        s = jnp.einsum("bqd,bkd->bqk", q, k) / 4.0
        return jnp.einsum("bqk,bkd->bqd", jax.nn.softmax(s, -1), v)

    qkv = [arr(4, 16, 8) for _ in range(3)]
    case("seq_attention", attn, tuple(qkv), [P(None, "d"), P(), P()], M4, note="query sequence split, K/V replicated")

    def moe_ref(xs, we):
        return np.stack([np.tanh(xs[r] @ we[r % 4]) for r in range(16)])

    def moe(xs, wexp):  # tokens split over experts' chips: all-to-all dispatch and return
        def body(t, we):
            t = jax.lax.all_to_all(t, "d", 0, 0, tiled=True)
            t = jnp.tanh(t @ we[0])
            return jax.lax.all_to_all(t, "d", 0, 0, tiled=True)
        return smap(body, M4, (P("d"), P("d")), P("d"))(xs, wexp)

    case("moe_all_to_all", moe, (arr(16, 8), arr(4, 8, 8, scale=0.3)), [P("d"), P("d")], M4, ref=moe_ref,
         note="MoE: all_to_all dispatch, per-expert matmul, all_to_all return")
    case("data_2", lambda a, b: (a @ b).sum(0), (arr(8, 16), arr(16, 4)), [P("d"), P()], M2, note="2 devices")

    def scan_dp(a, ws):
        return jax.lax.scan(lambda c, wi: (jnp.tanh(c @ wi), None), a, ws)[0]

    case("scan_dp", scan_dp, (arr(16, 32), arr(3, 32, 32, scale=0.2)), [P("d"), P()], M8, note="lax.scan over layers")
    pmap_case("pmap_psum", lambda a: (jax.lax.psum(a, "i"), jax.lax.all_gather(a, "i").sum(0)), arr(8, 4),
              lambda a: (np.broadcast_to(a.sum(0), a.shape), np.broadcast_to(a.sum(0), a.shape)), note="pmap psum + all_gather")

    # ---- added after the first 26 (inputs drawn after theirs, so theirs are unchanged) ----
    def fsdp_body(w1, w2, a, yy):  # explicit FSDP: gather params, local grads, reduce-scatter them
        full = [jax.lax.all_gather(w1, "d", tiled=True), jax.lax.all_gather(w2, "d", tiled=True)]
        l, g = jax.value_and_grad(loss)(full, a, yy)
        g = [jax.lax.psum_scatter(gi, "d", tiled=True) / 8 for gi in g]
        return jax.lax.pmean(l, "d"), w1 - 0.1 * g[0], w2 - 0.1 * g[1]

    def sgd_ref(w1, w2, a, yy):
        with jax.default_device(DEV[0]):
            l, (n1, n2) = jax.jit(sgd)([w1, w2], a, yy)
        return l, n1, n2

    case("fsdp_shmap", smap(fsdp_body, M8, (P("d"), P("d"), P("d"), P("d")), (P(), P("d"), P("d"))),
         (params[0], params[1], x64, y), [P("d"), P("d"), P("d"), P("d")], M8, ref=sgd_ref,
         note="FSDP step in shard_map: all_gather params, psum_scatter grads (reference: the unsharded SGD step)")

    def attn_ag(q, k, v):  # sequence split: every device gathers K and V (ring-free)
        return attn(q, jax.lax.all_gather(k, "d", axis=1, tiled=True), jax.lax.all_gather(v, "d", axis=1, tiled=True))

    def attn_ref(q, k, v):
        with jax.default_device(DEV[0]):
            return jax.jit(attn)(q, k, v)

    qkv2 = [arr(4, 16, 8) for _ in range(3)]
    case("seq_attention_ag", smap(attn_ag, M4, (P(None, "d"),) * 3, P(None, "d")), tuple(qkv2), [P(None, "d")] * 3, M4,
         ref=attn_ref, note="sequence-sharded attention: all_gather K/V along the sequence")

    def block(xx, wq, wk, wv, wo, w1, w2):  # a transformer-ish block: data on x, heads and MLP on y
        def ln(t):
            m = t.mean(-1, keepdims=True)
            return (t - m) * jax.lax.rsqrt(((t - m) ** 2).mean(-1, keepdims=True) + 1e-5)
        h = ln(xx)
        b, s, dm = h.shape
        split = lambda t: t.reshape(b, s, 4, dm // 4)
        q, k, v = split(h @ wq), split(h @ wk), split(h @ wv)
        a = jax.nn.softmax(jnp.einsum("bqhd,bkhd->bhqk", q, k) / np.sqrt(dm // 4), -1)
        o = jnp.einsum("bhqk,bkhd->bqhd", a, v).reshape(b, s, dm)
        xx = xx + o @ wo
        return xx + jax.nn.gelu(ln(xx) @ w1) @ w2

    case("transformer_2d", block, (arr(4, 8, 32), arr(32, 32, scale=0.2), arr(32, 32, scale=0.2), arr(32, 32, scale=0.2),
                                   arr(32, 32, scale=0.2), arr(32, 64, scale=0.2), arr(64, 32, scale=0.2)),
         [P("x"), P(None, "y"), P(None, "y"), P(None, "y"), P("y", None), P(None, "y"), P("y", None)], M24, tol=1e-4,
         out_specs=P("x"), note="2-D mesh (data x model) transformer block: heads and MLP split over y")
    case("reshard_a2a", lambda a: a * 2, (arr(16, 16),), [P("d", None)], M8, out_specs=P(None, "d"),
         note="reshard P(d,None) -> P(None,d)")
    case("reshard_permute", lambda a: a + 1, (arr(8, 8),), [P("x", "y")], M22, out_specs=P("y", "x"),
         note="reshard P(x,y) -> P(y,x) on a 2x2 mesh: same blocks, other devices (collective-permute)")
    case("mlp_22", lambda a, b1, b2: jax.nn.relu(a @ b1) @ b2, (arr(8, 16), arr(16, 32, scale=0.3), arr(32, 8, scale=0.3)),
         [P("x"), P(None, "y"), P("y", None)], M22, note="data x model MLP on a 2x2 mesh of 4 devices")
    case("psum_2", smap(lambda a: jax.lax.psum(a * a, "d"), M2, P("d"), P()), (arr(4, 8),), [P("d")], M2,
         ref=lambda a: (a * a).reshape(2, 2, 8).sum(0), note="psum over 2 devices")
    case("transposed_mesh", lambda a, b: jnp.sum(jnp.tanh(a @ b), axis=0), (arr(16, 32), arr(32, 8, scale=0.3)),
         [P("x", "y"), P("y", None)], MT, out_specs=P("x"),
         note="mesh devices not in id order (Mesh(devices.reshape(2,4).T)): partition p runs on device_assignment[p]")
    case("psum_x_42", smap(lambda a: jax.lax.psum(a, "x"), M42, P("x", "y"), P(None, "y")), (arr(8, 8),), [P("x", "y")], M42,
         ref=lambda a: a.reshape(4, 2, 8).sum(0), note="shard_map psum over the 4-axis of a 4x2 mesh")

    try:
        import flax.linen as nn, optax
    except ImportError:
        nn = None
    if nn is not None:
        class CNN(nn.Module):
            @nn.compact
            def __call__(self, t):
                t = nn.relu(nn.Conv(4, (3, 3))(t))
                t = nn.avg_pool(t, (2, 2), (2, 2))
                return nn.Dense(10)(t.reshape(t.shape[0], -1))

        model = CNN()
        imgs, labels = arr(16, 8, 8, 1), rng.randint(0, 10, size=16).astype(np.int32)
        p0 = model.init(jax.random.PRNGKey(0), imgs[:1])["params"]
        p0 = jax.tree.map(lambda t: np.asarray(t), p0)
        tx = optax.sgd(0.1)

        def cnn_step(p, im, lb):
            def lossf(pp):
                lg = model.apply({"params": pp}, im)
                return optax.softmax_cross_entropy_with_integer_labels(lg, lb).mean()
            l, g = jax.value_and_grad(lossf)(p)
            upd, _ = tx.update(g, tx.init(p), p)
            return l, optax.apply_updates(p, upd)

        case("flax_cnn", cnn_step, (p0, imgs, labels), [jax.tree.map(lambda _: P(), p0), P("d"), P("d")], M8,
             note="flax CNN (conv, relu, avg_pool, dense) + optax SGD, batch split over 8 devices, params replicated")

    xp = arr(8, 4)
    pmap_case("pmap_ppermute", lambda a: jax.lax.ppermute(a, "i", [(i, (i + 1) % 8) for i in range(8)]) * 2, xp,
              lambda a: (np.roll(a, 1, 0) * 2,), note="pmap ring ppermute")
    xq = arr(4, 3)
    pmap_case("pmap_all_gather", lambda a: jax.lax.all_gather(a, "i") + jax.lax.axis_index("i"), xq,
              lambda a: (np.stack([a + i for i in range(4)]).astype(np.float32),), n=4,
              note="pmap all_gather (stacked) plus axis_index over 4 devices")

    add = "add {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n  ROOT s = f32[] add(a, b)\n}\n\n"
    def rsum(a, groups):  # every replica gets its group's sum
        out = np.zeros_like(a)
        for g in groups:
            out[g] = a[g].sum(0)
        return out

    replica_case("replica_psum", "HloModule replica_psum, replica_count=8\n\n" + add +
                 "ENTRY main {\n  p = f32[4]{0} parameter(0)\n"
                 "  all = f32[4]{0} all-reduce(p), replica_groups={}, to_apply=add\n"
                 "  half = f32[4]{0} all-reduce(p), replica_groups={{0,1,2,3},{4,5,6,7}}, to_apply=add\n"
                 "  pairs = f32[4]{0} all-reduce(p), replica_groups=[2,4]<=[8], to_apply=add\n"
                 "  strided = f32[4]{0} all-reduce(p), replica_groups=[4,2]<=[2,4]T(1,0), to_apply=add\n"
                 "  ROOT t = (f32[4]{0}, f32[4]{0}, f32[4]{0}, f32[4]{0}) tuple(all, half, pairs, strided)\n}\n", arr(8, 4),
                 lambda a: (rsum(a, [list(range(8))]), rsum(a, [[0, 1, 2, 3], [4, 5, 6, 7]]), rsum(a, [[0, 1, 2, 3], [4, 5, 6, 7]]),
                            rsum(a, [[0, 4], [1, 5], [2, 6], [3, 7]])),
                 8, note="cross-replica all-reduce (replica_count=8): all replicas ({}), explicit groups of 4, "
                         "the same groups as iota [2,4]<=[8], and strided pairs as [4,2]<=[2,4]T(1,0)")
    replica_case("replica_all_gather", "HloModule replica_all_gather, replica_count=4\n\n"
                 "ENTRY main {\n  p = f32[2,3]{1,0} parameter(0)\n"
                 "  g = f32[8,3]{1,0} all-gather(p), replica_groups={{0,1,2,3}}, dimensions={0}\n"
                 "  r = u32[] replica-id()\n  rf = f32[] convert(r)\n  rb = f32[8,3]{1,0} broadcast(rf), dimensions={}\n"
                 "  ROOT s = f32[8,3]{1,0} add(g, rb)\n}\n", arr(4, 2, 3),
                 lambda a: (np.stack([a.reshape(8, 3) + i for i in range(4)]).astype(np.float32),), 4,
                 note="cross-replica all-gather plus replica-id (replica_count=4)")
    replica_case("replica_permute", "HloModule replica_permute, replica_count=8\n\n"
                 "ENTRY main {\n  p = f32[5]{0} parameter(0)\n"
                 "  ROOT c = f32[5]{0} collective-permute(p), source_target_pairs={{0,1},{1,2},{2,3},{3,0},{4,6},{6,4}}\n}\n",
                 arr(8, 5), lambda a: (np.stack([a[3], a[0], a[1], a[2], a[6], 0 * a[5], a[4], 0 * a[7]]),), 8,
                 note="cross-replica collective-permute: a 4-cycle, a swap, two replicas receive nothing (zeros)")

    # ---- expert parallelism from jax.jit (GShard's pattern, no shard_map) ----
    def moe_jit(xx, disp, w_in, w_out):
        # xx [G, S, D]: token groups split over d; disp [G, S, E, C]: each token's expert and
        # slot (one-hot); w_in/w_out [E, ...]: experts split over d. Moving the dispatched
        # tokens from a group split to an expert split (and back) is an all-to-all.
        xe = jnp.einsum("gsec,gsd->gecd", disp, xx)
        xe = jax.lax.with_sharding_constraint(xe, NS(M4, P(None, "d")))
        h = jnp.einsum("gecf,efd->gecd", jax.nn.relu(jnp.einsum("gecd,edf->gecf", xe, w_in)), w_out)
        h = jax.lax.with_sharding_constraint(h, NS(M4, P("d")))
        return jnp.einsum("gsec,gecd->gsd", disp, h)

    G, S, E, C, D, F = 4, 8, 4, 4, 8, 16
    route = rng.randint(0, E, size=(G, S))
    disp = np.zeros((G, S, E, C), np.float32)
    for g in range(G):
        seen = [0] * E
        for t in range(S):
            e = route[g, t]
            if seen[e] < C:  # tokens past an expert's capacity are dropped, as in GShard
                disp[g, t, e, seen[e]] = 1
                seen[e] += 1
    case("moe_jit", moe_jit, (arr(G, S, D), disp, arr(E, D, F, scale=0.3), arr(E, F, D, scale=0.3)),
         [P("d"), P("d"), P("d"), P("d")], M4, tol=1e-5, out_specs=P("d"),
         note="MoE from jax.jit (GShard): tokens dispatched by einsum, sharding constraints move them "
              "between a group split and an expert split (all-to-all), experts computed locally")

    # ---- a tensor-parallel convolution: filters split along their output features ----
    def tp_conv(im, k1, k2):
        dn = ("NHWC", "HWIO", "NHWC")
        h = jax.nn.relu(jax.lax.conv_general_dilated(im, k1, (1, 1), "SAME", dimension_numbers=dn))
        return jax.lax.conv_general_dilated(h, k2, (1, 1), "SAME", dimension_numbers=dn).sum(axis=(1, 2))

    case("tp_conv", tp_conv, (arr(8, 6, 6, 4), arr(3, 3, 4, 8, scale=0.3), arr(1, 1, 8, 4, scale=0.3)),
         [P("x"), P(None, None, None, "y"), P(None, None, "y", None)], M24, tol=1e-4,
         note="tensor-parallel convolutions on a 2x4 mesh: batch over x, the first conv's filters split along "
              "their output features over y, the second's along their input features (one all-reduce)")
    # shard_map manual over one axis of two (partially manual: last_tile_dims={manual, ...})
    case("smap_part_x", smap_part(lambda a, w: jax.lax.psum(a @ w, "x"), M24, (P("x", None), P()), P(None, None), "x"),
         (arr(16, 16), arr(16, 8, scale=0.3)), [P("x", "y"), P()], M24,
         ref=lambda a, w: a[:8] @ w + a[8:] @ w, note="shard_map manual over x only (y automatic): a matmul per x block, psum over x")
    case("smap_part_y", smap_part(lambda a: jnp.tanh(a) * 2 + jax.lax.psum(a, "y").sum(0, keepdims=True), M24,
                                  P(None, "y"), P(None, "y"), "y"),
         (arr(8, 16),), [P("x", "y")], M24,
         ref=lambda a: np.tanh(a) * 2 + np.tile(a.reshape(8, 4, 4).sum(1).sum(0, keepdims=True), (1, 4)),
         note="shard_map manual over y only (x automatic): elementwise, a psum over y and a sum")

    total = sum(s for _, _, s in SUMMARY)
    print(f"{len(SUMMARY)} cases, {total} bytes")


if __name__ == "__main__":
    main()
