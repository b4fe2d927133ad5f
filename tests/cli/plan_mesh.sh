#!/bin/sh
# The planner lays its mesh (data, stage, fsdp, tensor; device id tensor-minor) onto a 3-D
# torus slice as MaxText's mesh does (jax mesh_utils.create_device_mesh: the most
# network-intensive axis, tensor, first takes the first subset of physical axes, most axes
# first, whose sizes multiply to its size; docs/plan.md, "Mesh on the slice"): fsdp 16 x
# tensor 8 on a v5p 4x4x8 puts tensor on the z ring of 8, timed as tpusim's 8x4x4 (tensor on
# x). Where JAX and libtpu's compile-only topologies are here, the layout is checked against
# create_device_mesh itself. Needs python3.
. tests/cli/lib/preamble.sh
command -v python3 > /dev/null 2>&1 || { echo "SKIP: no python3"; exit 77; }

python3 - > "$T/chk" 2>&1 << 'PY' || fail "mesh_topology: $(cat "$T/chk")"
import sys
sys.path.insert(0, "tools/plan")
import plan
chip = {"topology": "3d-torus"}
class St:
    def __init__(s, R, P, F, T):
        s.R, s.P, s.F, s.T, s.N, s.c = R, P, F, T, R * P * F * T, {}
want = {(1, 1, 16, 8): "8x4x4", (1, 1, 32, 4): "4x8x4", (1, 1, 4, 8): "4x2x4",
        # the default already: tensor on x (4x4x4, 8x8x8, 2x2x4's x-y plane), one axis > 1
        (1, 1, 16, 4): None, (1, 1, 64, 8): None, (1, 1, 4, 4): None, (1, 1, 128, 1): None, (1, 4, 4, 4): None}
for k, v in want.items():
    got = plan.mesh_topology(chip, St(*k))
    assert got == v, (k, got, v)
assert plan.mesh_topology({"topology": "2d-torus"}, St(1, 1, 16, 16)) is None
# No assignment on the default shape (v5p-1024's 8x8x8 has no axis or plane of 16; JAX raises):
# the other shape of those chips that has one, 4x8x16 (tensor on the 16 ring, fsdp on 4x8), as
# a user must ask for it; v5p's largest slice 16x16x24 rules out 4x4x32. Without the chip's
# largest slice no other shape is known and the default stays.
v5p = {"topology": "3d-torus", "max_dims": [16, 16, 24]}
assert plan.other_shapes(v5p, 512, [8, 8, 8]) == [[4, 8, 16]], plan.other_shapes(v5p, 512, [8, 8, 8])
assert plan.jax_assignment([8, 8, 8], [1, 1, 32, 16]) is None
for k, v in {(1, 1, 32, 16): "16x8x4", (4, 1, 16, 8): "8x16x4", (1, 1, 64, 8): None}.items():
    got = plan.mesh_topology(v5p, St(*k))
    assert got == v, (k, got, v)
assert plan.mesh_topology(chip, St(1, 1, 32, 16)) is None
PY

# The plan's own timing runs on that shape.
cat > "$T/m.json" << 'J'
{"name": "t", "layers": 2, "d_model": 256, "heads": 8, "kv_heads": 8, "head_dim": 32, "mlp": 512, "mlp_kind": "swiglu",
 "vocab": 512, "seq": 64, "batch_tokens": 8192, "train_tokens": 1e9, "dtype": "bf16", "optimizer": "adam", "experts": 0}
J
"$BIN" plan "$T/m.json" --chips v5p --slice 128 --tensor 8 --fsdp 16 --data 1 --micro 1 --remat full --ignore-hbm --json \
  > "$T/p.json" 2> "$T/err"
python3 - "$T/p.json" > "$T/chk" 2>&1 << 'PY' || fail "plan topology: $(cat "$T/chk") $(cat "$T/err")"
import json, sys
j = json.load(open(sys.argv[1]))
rows = [x for x in j["candidates"] + j["not_fit"] if x.get("step_s")]
assert rows and rows[0]["topology"].startswith("8x4x4"), rows[:1]
PY

# Against create_device_mesh on libtpu's compile-only topologies (skipped without them).
TPU_ACCELERATOR_TYPE=v5litepod-8 ALLOW_MULTIPLE_LIBTPU_LOAD=1 timeout 300 python3 - > "$T/chk" 2>&1 << 'PY'
import itertools, sys
sys.path.insert(0, "tools/plan")
import plan
try:
    from jax.experimental import topologies, mesh_utils
    topo = {n: list(topologies.get_topology_desc(platform="tpu", topology_name=t).devices)
            for n, t in ((64, "v5p:4x4x4"), (128, "v5p:4x4x8"))}
except Exception as e:
    print("no topologies:", e)
    sys.exit(77)
class St:
    def __init__(s, R, P, F, T):
        s.R, s.P, s.F, s.T, s.N, s.c = R, P, F, T, R * P * F * T, {}
for k in ((1, 1, 16, 8), (1, 1, 32, 4), (1, 1, 16, 4), (4, 1, 4, 4), (1, 1, 4, 16), (4, 1, 4, 8)):
    st = St(*k)
    devs = topo[st.N]
    mesh = mesh_utils.create_device_mesh(k, devs).reshape(-1)
    chip = {"topology": "3d-torus"}
    got = plan.mesh_topology(chip, st)
    shape = [int(x) for x in got.split("x")] if got else plan.default_dims(chip, st.N)
    def mine(i):
        return (i % shape[0], i // shape[0] % shape[1], i // (shape[0] * shape[1]))
    ok = any(all(tuple(mesh[i].coords[p] for p in perm) == mine(i) for i in range(st.N))
             for perm in itertools.permutations(range(3)))
    assert ok, (k, shape)
# 1x32x16 on 512 chips: create_device_mesh raises on 8x8x8 and lays the planner's shape on 4x8x16.
v5p = {"topology": "3d-torus", "max_dims": [16, 16, 24]}
st = St(1, 1, 32, 16)
try:
    mesh_utils.create_device_mesh((1, 1, 32, 16), list(topologies.get_topology_desc(platform="tpu", topology_name="v5p:8x8x8").devices))
    raise AssertionError("create_device_mesh found 1x32x16 on 8x8x8")
except NotImplementedError:
    pass
mesh = mesh_utils.create_device_mesh((1, 1, 32, 16), list(topologies.get_topology_desc(platform="tpu", topology_name="v5p:4x8x16").devices)).reshape(-1)
shape = [int(x) for x in plan.mesh_topology(v5p, st).split("x")]
ok = any(all(tuple(mesh[i].coords[p] for p in perm) == (i % shape[0], i // shape[0] % shape[1], i // (shape[0] * shape[1]))
             for i in range(st.N)) for perm in itertools.permutations(range(3)))
assert ok, ("1x32x16 on 512", shape)
PY
rc=$?
[ "$rc" = 0 ] || [ "$rc" = 77 ] || fail "against create_device_mesh: $(tail -3 "$T/chk")"
[ "$fails" = 0 ] || exit 1
