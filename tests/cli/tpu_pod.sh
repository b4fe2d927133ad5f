#!/bin/sh
# Partitioned programs from the real TPU compiler (tests/tpu/cases/pod_*: libtpu compile-only
# on a v5e 2x4 slice, committed): each runs on 8 simulated chips as compiled — its
# collectives, layouts and fusions kept — and gives the values of its source program (JAX's
# lowered sharded HLO, partitioned by tpusim itself), within 1e-5 of the largest output (the
# compiler reorders f32 sums) and JAX's values (outK.npy: XLA CPU on prog.hlo, within jax.json's
# atol per output); its step time is held within 5 % of the ratio to the compiler's own
# estimate measured before.
. tests/cli/lib/preamble.sh
command -v python3 > /dev/null && python3 -c "import numpy" 2> /dev/null || { echo "skip: no python3 with numpy"; exit 77; }
# tpusim's step cycles over the compiler's estimated_cycles (both v5e cycles), as measured when
# the band was set: a change of 5 % either way fails. The compiler's figure is its sum of
# per-op estimates for one chip of the 2x4 slice; tpusim times 0.88x (pod_moe) to 10x
# (pod_scan_fsdp) of it: known gaps, not yet explained (docs/testing.md). pod_scan_fsdp
# 9.634 -> 10.167 when a while loop's state stayed in VMEM (docs/timing.md, "Memory
# spaces"): the scan body's kernels read it on chip, a pass charged in their own time;
# 10.167 -> 9.502 when the compiled loop counter stayed in scalar memory and the body's
# kernels paid their read latency from their own start (docs/timing.md, kernels in a while
# loop's body).
# pod_conv_spatial 1.644 -> 1.554: 1.565 at session 19's start (drift within the band), then its
# copy.4 out of VMEM into HBM paid no read on chip (1,951 -> 1,801 cycles; docs/timing-memory.md,
# copy kernels out of VMEM).
# pod_dp_mlp 3.484 -> 3.142, pod_fsdp_mlp 3.940 -> 3.686 (session 32): v5e's matmul kernels
# with no transfer (operands and 32-bit result in VMEM) pay no start (matmul_resident_no_start).
cat > "$T/bands" <<'EOF'
pod_block_3d 1.452
pod_conv_spatial 1.554
pod_dp_mlp 3.142
pod_embed 1.772
pod_fsdp_mlp 3.686
pod_layernorm_tp 2.444
pod_megatron 4.690
pod_moe 0.883
pod_rowsum 4.650
pod_scan_fsdp 9.502
pod_seq_attention 2.102
EOF
n=0
for d in tests/tpu/cases/pod_*; do
  [ -d "$d" ] || continue
  name=$(basename "$d")
  n=$((n + 1))
  ins=""
  for f in $(ls "$d"/in*.npy | sort -V); do ins="$ins -i $f"; done
  shs=$(python3 -c "import json,sys; print(' '.join('--out-sharding \"%s\"' % s for s in json.load(open(sys.argv[1]))['out_shardings']))" "$d/meta.json")
  eval "\"$BIN\" run \"$d/tpu.hlo\" $ins $shs --backend tpu --chip v5e -o \"$T/$name.tpu\"" > "$T/$name.log" 2> "$T/err" ||
    { fail "$name tpu.hlo exited $?: $(cat "$T/err")"; continue; }
  grep -q "^pod: 8 devices" "$T/$name.log" || fail "$name tpu.hlo did not run on 8 chips"
  "$BIN" run "$d/prog.hlo" $ins --backend tpu --chip v5e -o "$T/$name.src" > "$T/$name.src.log" 2> "$T/err" ||
    { fail "$name prog.hlo exited $?: $(cat "$T/err")"; continue; }
  python3 - "$T/$name.tpu" "$T/$name.src" "$name" <<'EOF' || fail "$name: values differ"
import glob, os, sys
import numpy as np
a, b, name = sys.argv[1:]
files = sorted(os.listdir(b))
assert files and files == sorted(os.listdir(a)), (files, os.listdir(a))
for f in files:
    x, y = np.load(os.path.join(a, f)), np.load(os.path.join(b, f))
    assert x.shape == y.shape, (f, x.shape, y.shape)
    big = max(1.0, float(np.abs(y).max()))
    err = float(np.abs(x.astype(np.float64) - y).max())
    assert err <= 1e-5 * big, (f, err, big)
EOF
  python3 - "$T/$name.tpu" "$d" "$name" <<'EOF' || fail "$name: values differ from JAX's"
import json, os, sys
import numpy as np
a, d, name = sys.argv[1:]
outs = json.load(open(os.path.join(d, "jax.json")))["outputs"]
assert len(outs) == len(os.listdir(a)), (len(outs), os.listdir(a))
for k, o in enumerate(outs):
    got, want = np.load(os.path.join(a, f"{k}.npy")), np.load(os.path.join(d, f"out{k}.npy"))
    assert got.shape == want.shape, (k, got.shape, want.shape)
    err = float(np.abs(got.astype(np.float64) - want).max()) if want.size else 0.0
    assert err <= o["atol"], (name, k, err, o["atol"])
EOF
  est=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['estimated_cycles'])" "$d/meta.json")
  cyc=$(sed -n 's/^step time: .*(\([0-9]*\) cycles at 1.5 GHz).*/\1/p' "$T/$name.log")
  want=$(sed -n "s/^$name //p" "$T/bands")
  python3 -c "import sys; n, c, e, w = sys.argv[1], *map(float, sys.argv[2:]); r = c / e; print('  %s: tpusim %d cycles, the compiler %d: ratio %.3f (measured %.3f)' % (n, c, e, r, w)); sys.exit(abs(r / w - 1) > 0.05)" \
    "$name" "${cyc:-0}" "$est" "${want:-0}" || fail "$name: step time outside 5 % of the ratio to the compiler's estimate measured before (${want:-none})"
done
[ $n -ge 4 ] || fail "only $n pod cases"
[ $fails -eq 0 ] && echo "TPU-compiled pod programs: $n of $n match their source on 8 chips"
exit $fails
