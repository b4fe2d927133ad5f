#!/bin/sh
# The XLA TPU compiler's own compiled programs (bench/fidelity/compiled/NAME.CHIP.hlo, written
# by `bench/fidelity/gen.py compiled=CHIP NAME...` with libtpu, committed) timed by tpusim as
# they are — their fusions (nested ones too), layouts, asynchronous copies and slices, dots
# written as input-dilated or padded convolutions, whole-row reduce-windows — against the
# compiler's own estimated_cycles for the same program (bench/fidelity/corpus/NAME.json).
# Each must come within a factor of 2 (the table is printed); before the nested-fusion,
# whole-row reduce-window and single-tap dilated-convolution rules, the compiled attention
# forward timed 47x the compiler's estimate and a transformer layer did not parse.
# Also: slice-start / slice-done and the ConcatBitcast custom call give the values they mean.
. tests/cli/lib/preamble.sh
command -v python3 > /dev/null && python3 -c "import numpy" 2> /dev/null || { echo "skip: no python3 with numpy"; exit 77; }
# The programs that carry each construct (the directory holds the whole v5e corpus; its
# statistics: python3 bench/fidelity/compare.py --compiled --chips v5e, docs/fidelity.md)
CHECKED="adam_f32_16777216 attn_fwd_b2h32s2048d128_causal attn_fwd_b4h16s1024d128_causal conv_fwd_c3x3_28_128_bf16
cross_entropy_8192x32000_bf16 decode_bf16_1x4096x4096 gemm_bf16_4096x4096x4096 layer_fwd_b4s1024d1024
layer_bwd_b4s1024d1024 layernorm_fwd_8192x4096_bfloat16 softmax_4096x4096_float32"
# v6e's programs view tiled arrays' padded bytes as s8 and join byte pieces with ConcatBitcast
CHECKED_V6E="conv_bwd_c1x1_56_64_256_bf16 layer_fwd_b8s512d768 mlp_train_step_bf16"
n=0
for f in $(for p in $CHECKED; do echo bench/fidelity/compiled/$p.v5e.hlo; done) \
         $(for p in $CHECKED_V6E; do echo bench/fidelity/compiled/$p.v6e.hlo; done); do
  [ -f "$f" ] || { fail "$f missing"; continue; }
  base=$(basename "$f" .hlo)
  name=${base%.*}
  chip=${base##*.}
  n=$((n + 1))
  "$BIN" run "$f" --chip "$chip" --mode timing > "$T/out" 2> "$T/err" || { fail "$base: exited $?: $(cat "$T/err")"; continue; }
  python3 - "$T/out" "bench/fidelity/corpus/$name.json" "$chip" "$base" <<'EOF' || fail "$base: over a factor of 2 from the compiler"
import json, re, sys
out, rec, chip, base = sys.argv[1:]
m = re.search(r"^step time: .*\((\d+) cycles at ([\d.]+) GHz\)", open(out).read(), re.M)
cyc, ghz = int(m.group(1)), float(m.group(2))
comp = json.load(open(rec))["chips"][chip]["estimated_cycles"]
clock = {"v4": 1.05e9, "v5e": 1.5e9, "v5p": 1.75e9, "v6e": 1.75e9}[chip]
ratio = (cyc / (ghz * 1e9)) / (comp / clock)
print(f"  {base:45s} tpusim {cyc / (ghz * 1e3):10.1f} us  compiler {comp / clock * 1e6:10.1f} us  ratio {ratio:.2f}")
sys.exit(0 if 0.5 <= ratio <= 2.0 else 1)
EOF
done
[ "$n" -ge 14 ] || fail "only $n compiled programs timed"
# their values are not modelled: a clear error at the bitcast, exit 2, no partial output
"$BIN" run bench/fidelity/compiled/mlp_train_step_bf16.v6e.hlo --chip v6e -o "$T/v6e_out" > /dev/null 2> "$T/err"
[ $? -eq 2 ] && grep -q "^bench/fidelity/compiled/mlp_train_step_bf16.v6e.hlo:[0-9]*:[0-9]*: error: bitcast .* values are not modelled (time the program with --mode timing)" "$T/err" ||
  fail "byte bitcast in full mode: $(cat "$T/err")"
[ ! -e "$T/v6e_out" ] || [ -z "$(ls "$T/v6e_out")" ] || fail "partial output written"

# slice-start / slice-done / ConcatBitcast: four slices of x, joined again, are x
cat > "$T/sl.hlo" <<'EOF'
HloModule m
ENTRY e {
  x = f32[8,16]{1,0} parameter(0)
  s0 = ((f32[8,16]{1,0}), f32[2,16]{1,0}, s32[]) slice-start(x), slice={[0:2], [0:16]}
  s1 = ((f32[8,16]{1,0}), f32[2,16]{1,0}, s32[]) slice-start(x), slice={[2:4], [0:16]}
  s2 = ((f32[8,16]{1,0}), f32[4,16]{1,0}, s32[]) slice-start(x), slice={[4:8], [0:16]}
  d0 = f32[2,16]{1,0} slice-done(s0)
  d1 = f32[2,16]{1,0} slice-done(s1)
  d2 = f32[4,16]{1,0} slice-done(s2)
  ROOT c = f32[8,16]{1,0} custom-call(d0, d1, d2), custom_call_target="ConcatBitcast"
}
EOF
python3 -c "import numpy as np; np.save('$T/x.npy', np.arange(128, dtype=np.float32).reshape(8, 16))"
for be in ref tpu; do
  "$BIN" run "$T/sl.hlo" -i "$T/x.npy" --backend $be -o "$T/sl_$be" > /dev/null 2> "$T/err" || { fail "slices ($be): $(cat "$T/err")"; continue; }
  python3 -c "import numpy as np, sys; sys.exit(0 if np.array_equal(np.load('$T/sl_$be/0.npy'), np.load('$T/x.npy')) else 1)" ||
    fail "slices ($be): joined slices differ from x"
done
# a slice that leaves the operand is refused at its line
sed 's/slice={\[4:8\], \[0:16\]}/slice={[4:9], [0:16]}/' "$T/sl.hlo" > "$T/bad.hlo"
"$BIN" run "$T/bad.hlo" -i "$T/x.npy" > /dev/null 2> "$T/err" && fail "bad slice-start accepted"
grep -q "bad.hlo:6:.*error: .*range \[4:9\]" "$T/err" || fail "bad slice-start message: $(cat "$T/err")"

[ "$fails" = 0 ] || exit 1
echo "compiled_timing: $n compiled programs within a factor of 2 of the compiler; slices ok"
