"""Does the XLA TPU compiler fuse a dynamic-slice of the buffer a dynamic-update-slice updates
(the same index: A[j] read, added to, written back) into the in-place update's fusion?
Writes one record per case: which compiled fusions hold the dynamic-slice and the update."""
import json, os, re, sys, tempfile
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from libtpu import TOPO, compile_retry, emit

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "acc_slice.jsonl")

# A[j] += g in a while loop over j (the microbatch step's accumulator update), or once in the
# entry; `other` moves the slice to another index (j+1) or to a different buffer.
def prog(n, r, c, where, other, jsub=False):
    ds_idx = "j1" if other == "index" else "j"
    ds_buf = "B" if other == "buffer" else "A"
    upd = f"""
  g = f32[{r},{c}] parameter(1)
  zero = s32[] constant(0)
  one = s32[] constant(1)
  j1 = s32[] add(j, one)
  i1 = s32[] add(i, one)
  s = f32[1,{r},{c}] dynamic-slice({ds_buf}, {ds_idx}, zero, zero), dynamic_slice_sizes={{1,{r},{c}}}
  sr = f32[{r},{c}] reshape(s)
  a = f32[{r},{c}] add(sr, g)
  ar = f32[1,{r},{c}] reshape(a)
  u = f32[{n},{r},{c}] dynamic-update-slice(A, ar, j, zero, zero)"""
    if where == "entry":
        return f"""HloModule p
ENTRY e {{
  A = f32[{n},{r},{c}] parameter(0)
  B = f32[{n},{r},{c}] parameter(2)
  j = s32[] parameter(3)
{upd.replace('parameter(1)', 'parameter(1)')}
  ROOT t = (f32[{n},{r},{c}]) tuple(u)
}}"""
    T = f"(s32[], f32[{n},{r},{c}], f32[{r},{c}], f32[{n},{r},{c}])"
    body_upd = upd.replace(f"g = f32[{r},{c}] parameter(1)", f"g0 = f32[{r},{c}] get-tuple-element(p), index=2\n  g = f32[{r},{c}] multiply(g0, g0)")
    return f"""HloModule p
body {{
  p = {T} parameter(0)
  i = s32[] get-tuple-element(p), index=0
  lm1 = s32[] constant({n - 1})
  lm0 = s32[] constant(0)
  j = s32[] {"subtract(lm1, i)" if jsub else "add(i, lm0)"}
  A = f32[{n},{r},{c}] get-tuple-element(p), index=1
  B = f32[{n},{r},{c}] get-tuple-element(p), index=3
{body_upd}
  ROOT t = {T} tuple(i1, u, g0, B)
}}
cond {{
  p = {T} parameter(0)
  j = s32[] get-tuple-element(p), index=0
  k = s32[] constant({n})
  ROOT lt = pred[] compare(j, k), direction=LT
}}
ENTRY e {{
  A = f32[{n},{r},{c}] parameter(0)
  g = f32[{r},{c}] parameter(1)
  B = f32[{n},{r},{c}] parameter(2)
  z = s32[] constant(0)
  t0 = {T} tuple(z, A, g, B)
  w = {T} while(t0), condition=cond, body=body
  ROOT o = f32[{n},{r},{c}] get-tuple-element(w), index=1
}}"""


def fusions(compiled):
    """[name, root opcode, has dynamic-slice] of each fusion computation the compiled program calls."""
    comps, cur = {}, None
    for line in compiled.splitlines():
        m = re.match(r'%?(\S+) .*\{\s*$', line) if not line.startswith(" ") else None
        if m: cur = m.group(1); comps[cur] = []
        elif cur and line.strip(): comps[cur].append(line)
    out = []
    for name, lines in comps.items():
        if not name.startswith("fused") and "fused" not in name: continue
        ops = [re.search(r'= \S+ (\S+?)\(', l).group(1) for l in lines if re.search(r'= \S+ (\S+?)\(', l)]
        root = next((re.search(r'= \S+ (\S+?)\(', l).group(1) for l in lines if "ROOT" in l), None)
        out.append([name, root, "dynamic-slice" in ops, "dynamic-update-slice" in ops])
    return out


if __name__ == "__main__":
    gens = sys.argv[1].split(",") if len(sys.argv) > 1 else ["v5p"]
    cases = [(4, 2048, 1024, "loop", "same"), (4, 256, 512, "loop", "same"), (4, 2048, 1024, "entry", "same"),
             (4, 256, 512, "entry", "same"), (4, 2048, 1024, "loop", "index"), (4, 2048, 1024, "loop", "buffer"),
             (2, 1024, 6144, "loop", "same"), (8, 64, 128, "loop", "same")]
    f = open(OUT, "a")
    for gen in gens:
        for n, r, c, where, other in cases:
            with tempfile.TemporaryDirectory() as d:
                summ, out = compile_retry(prog(n, r, c, where, other), TOPO[gen], d)
            if not out: continue
            fs = fusions(out)
            # fused with the update: a fusion holding both the slice and the update
            fused = any(f[2] and f[3] for f in fs)
            sep = any(f[2] and not f[3] for f in fs)
            emit({"gen": gen, "n": n, "r": r, "c": c, "where": where, "other": other,
                  "slice_in_update": fused, "slice_separate": sep, "fusions": fs}, f)
