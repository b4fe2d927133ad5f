#!/bin/sh
# bench/fidelity/kernel_ratios.py pairs each top-level kernel of the compiler's compiled
# programs with tpusim's op of the same name and describes it (kind, fused root, memory spaces
# of operands and result, size): on conv1d_b16l100_c128to128_k5s2 (one convolution fusion
# reading a CMEM copy of its input on v4, both operands from HBM/VMEM elsewhere).
. tests/cli/lib/preamble.sh
command -v python3 >/dev/null 2>&1 || { echo "SKIP: no python3"; exit 77; }
python3 bench/fidelity/kernel_ratios.py --tpusim "$BIN" --split tune --only conv1d_b16l100_c128to128_k5s2 \
  --min-n 1 --jobs 2 --save "$T/k.json" --list "" --unpaired > "$T/out" 2> "$T/err" || fail "kernel_ratios.py exited $?: $(cat "$T/err")"
grep -q "^fusion:kOutput convolution in:ch/out:h <256K" "$T/out" || fail "no v4 CMEM convolution category: $(cat "$T/out")"
grep -q "^unpaired kernels" "$T/out" || fail "no unpaired section: $(cat "$T/out")"
python3 - "$T/k.json" <<'PY' || fail "kernel rows wrong"
import json, sys
rows = [r for r in json.load(open(sys.argv[1])) if not r.get("side")]
assert {r["chip"] for r in rows} == {"v4", "v5e", "v5p", "v6e"}, rows
f = [r for r in rows if r["op"] == "fusion"]
assert len(f) == 4 and all(r["kind"] == "fusion:kOutput" and r["root"] == "convolution" for r in f), f
for r in f:
    assert r["compiler_cycles"] > 0 and r["tpusim_cycles"] > 0 and abs(r["ratio"] - 1) < 0.5, r
v4 = next(r for r in f if r["chip"] == "v4")
assert v4["space"] == "in:ch/out:h" and v4["in_bytes"] == 573440 and v4["out_bytes"] == 204800, v4
PY
[ $fails -eq 0 ] && echo "kernel_ratios: ok"
exit $fails
