#!/bin/sh
# jax.lax.approx_max_k / approx_min_k as lowered for a TPU: custom-call "PartialReduce"
# (ir/custom_call.h). Bin b of the result holds the comparator's first element among the
# positions b, b + M, b + 2M, ... of the reduction dimension (M bins), the initial values
# when there are none; both back ends give those values (checked against NumPy), the sort +
# slice after it the exact top k where the top k fall in distinct bins, the tpu back end
# times it, and a PartialReduce without its reduction_dim is refused in one line.
. tests/cli/lib/preamble.sh
command -v python3 > /dev/null && python3 -c "import numpy" 2> /dev/null || { echo "skip: no python3 with numpy"; exit 77; }

cat > "$T/p.hlo" <<'HLO'
HloModule approx

gt {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  i = s32[] parameter(2)
  j = s32[] parameter(3)
  ROOT c = pred[] compare(a, b), direction=GT
}

lt {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  i = s32[] parameter(2)
  j = s32[] parameter(3)
  ROOT c = pred[] compare(a, b), direction=LT
}

ENTRY e {
  x = f32[2,300]{1,0} parameter(0)
  y = f32[100,3]{1,0} parameter(1)
  io = s32[300]{0} iota(), iota_dimension=0
  ix = s32[2,300]{1,0} broadcast(io), dimensions={1}
  iy = s32[100,3]{1,0} iota(), iota_dimension=0
  ninf = f32[] constant(-inf)
  pinf = f32[] constant(inf)
  m1 = s32[] constant(-1)
  px = (f32[2,256]{1,0}, s32[2,256]{1,0}) custom-call(x, ix, ninf, m1), custom_call_target="PartialReduce", called_computations={gt}, backend_config={"log2_reduction": 1, "reduction_dim": 1, "to_apply_type": "comparator", "top_k": 4, "recall_target": 0.950000}
  py = (f32[128,3]{1,0}, s32[128,3]{1,0}) custom-call(y, iy, pinf, m1), custom_call_target="PartialReduce", called_computations={lt}, backend_config={"log2_reduction": 1, "reduction_dim": 0, "to_apply_type": "comparator", "top_k": 2, "recall_target": 0.950000}
  xv = f32[2,256]{1,0} get-tuple-element(px), index=0
  xi = s32[2,256]{1,0} get-tuple-element(px), index=1
  s = (f32[2,256]{1,0}, s32[2,256]{1,0}) sort(xv, xi), dimensions={1}, to_apply=gt
  sv = f32[2,256]{1,0} get-tuple-element(s), index=0
  si = s32[2,256]{1,0} get-tuple-element(s), index=1
  tv = f32[2,4]{1,0} slice(sv), slice={[0:2], [0:4]}
  ti = s32[2,4]{1,0} slice(si), slice={[0:2], [0:4]}
  yv = f32[128,3]{1,0} get-tuple-element(py), index=0
  yi = s32[128,3]{1,0} get-tuple-element(py), index=1
  ROOT r = (f32[2,256]{1,0}, s32[2,256]{1,0}, f32[2,4]{1,0}, s32[2,4]{1,0}, f32[128,3]{1,0}, s32[128,3]{1,0}) tuple(xv, xi, tv, ti, yv, yi)
}
HLO

# Inputs: distinct values, with ties in y's bins (the first position stays), and x's top 4
# in distinct bins.
python3 - "$T" <<'PY' || fail "inputs"
import sys, numpy as np
t = sys.argv[1]
r = np.random.default_rng(7)
x = r.permutation(600).astype(np.float32).reshape(2, 300)
x[0, [5, 40, 77, 120]] = [1000, 999, 998, 997]   # distinct bins (mod 256)
x[1, [3, 259, 44]] = [2000, 1999, 1998]           # 3 and 259 share bin 3: 1999 is lost
y = r.integers(0, 5, size=(100, 3)).astype(np.float32)
np.save(t + "/x.npy", x)
np.save(t + "/y.npy", y)
PY

for be in tpu ref; do
  "$BIN" run "$T/p.hlo" -i "$T/x.npy" -i "$T/y.npy" --backend $be -o "$T/$be" > "$T/$be.out" 2> "$T/err" ||
    fail "$be run exited: $(cat "$T/err")"
done
grep -q "^step time: " "$T/tpu.out" || fail "tpu back end gave no step time"
python3 - "$T" <<'PY' || fail "values differ from the PartialReduce rule"
import sys, numpy as np
t = sys.argv[1]
x, y = np.load(t + "/x.npy"), np.load(t + "/y.npy")
def bins(a, m, better, init):
    n = a.shape[0]
    v = np.full((m,) + a.shape[1:], init, np.float32)
    i = np.full((m,) + a.shape[1:], -1, np.int32)
    for p in range(n):
        b = p % m
        w = better(a[p], v[b])
        v[b] = np.where(w, a[p], v[b])
        i[b] = np.where(w, p, i[b])
    return v, i
xv, xi = bins(x.T, 256, np.greater, -np.inf)
yv, yi = bins(y, 128, np.less, np.inf)
want = [xv.T, xi.T, None, None, yv, yi]
ok = True
for be in ("tpu", "ref"):
    for k, w in enumerate(want):
        got = np.load("%s/%s/%d.npy" % (t, be, k))
        if w is not None and not np.array_equal(got, w):
            print(be, "result", k, "differs"); ok = False
    tv, ti = np.load(t + "/%s/2.npy" % be), np.load(t + "/%s/3.npy" % be)
    if not (np.array_equal(tv[0], [1000, 999, 998, 997]) and np.array_equal(ti[0], [5, 40, 77, 120])):
        print(be, "row 0 is not the exact top 4:", tv[0], ti[0]); ok = False
    if not (np.array_equal(tv[1, :2], [2000, 1998]) and np.array_equal(ti[1, :2], [3, 44])):
        print(be, "row 1 does not lose 1999 to 2000's bin:", tv[1], ti[1]); ok = False
# empty bins (100..127 of y) keep the initial values
if not (np.all(yv[100:] == np.inf) and np.all(yi[100:] == -1)): print("empty bins"); ok = False
sys.exit(0 if ok else 1)
PY

# Without reduction_dim: one line, exit 2.
sed 's/"reduction_dim": 0, //' "$T/p.hlo" > "$T/bad.hlo"
"$BIN" run "$T/bad.hlo" --mode timing > /dev/null 2> "$T/err"
rc=$?
[ "$rc" = 2 ] || fail "bad PartialReduce exited $rc"
[ "$(wc -l < "$T/err")" = 1 ] && grep -q "error: .*PartialReduce" "$T/err" || fail "bad PartialReduce: $(cat "$T/err")"

[ "$fails" = 0 ] || exit 1
