#!/bin/sh
# A dot's result given back a size-1 dimension by a reshape and then transposed (as the XLA
# TPU compiler's simplifier leaves a batched dot of batch 1: dot, reshape, transpose) keeps
# its elementwise epilogue in the matmul's own fusion, as the compiler's final programs do
# (bench/spmd/corpus moe_smap: the GELU fused into the expert matmul), rather than a second
# kernel that reads the transposed result back.
. tests/cli/lib/preamble.sh
cat > "$T/e.hlo" <<'EOF'
HloModule e

ENTRY e {
  w = bf16[512,1024] parameter(0)
  x = bf16[8,256,512] parameter(1)
  d = bf16[1024,8,256] dot(w, x), lhs_contracting_dims={0}, rhs_contracting_dims={2}
  r = bf16[1,1024,8,256] reshape(d)
  t = bf16[8,1,256,1024] transpose(r), dimensions={2,0,3,1}
  a = bf16[8,1,256,1024] tanh(t)
  ROOT m = bf16[8,1,256,1024] multiply(a, t)
}
EOF
"$BIN" compile "$T/e.hlo" --emit hlo > "$T/out" 2> "$T/err" || fail "compile exited $?: $(cat "$T/err")"
[ "$(grep -c ' fusion(' "$T/out")" = 1 ] || fail "not one fusion: $(grep ' fusion(' "$T/out")"
grep -q "kind=kOutput" "$T/out" || fail "no matmul fusion"
awk '/^fused_computation/ {f = 1} f && / tanh\(/ {t = 1} f && / dot\(/ {d = 1} END {exit !(t && d)}' "$T/out" ||
  fail "the tanh is not in the dot's fusion"
[ "$fails" = 0 ] || exit 1
