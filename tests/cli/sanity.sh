#!/bin/sh
# Physics sanity of the timing model (qualitative, from the CLI's summary): a small bf16
# GEMM is memory-bound with a low MFU, a large one compute-bound above 90% MFU, a skinny
# one sits on the bandwidth roof, an int8 FC layer at batch 200 on TPU v1 is deep in the
# memory-bound region, and the Llama-2-70B-shaped per-chip training step times in
# --mode timing on v5p (and fails on v5e with the HBM capacity error).
. tests/cli/lib/preamble.sh

# gemm M N K IN_TYPE OUT_TYPE FILE: a plain dot, A[M,K] x B[K,N].
gemm() {
  printf 'HloModule gemm\nENTRY e {\n  a = %s[%s,%s]{1,0} parameter(0)\n  b = %s[%s,%s]{1,0} parameter(1)\n  ROOT d = %s[%s,%s]{1,0} dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n}\n' \
    "$4" "$1" "$3" "$4" "$3" "$2" "$5" "$1" "$2" > "$6"
}

# run NAME CHIP FILE: timing-only run; sets MFU (fraction, from "MFU: X%"), BOUND and ATT
# (achieved / attainable, fraction).
run() {
  if ! "$BIN" run "$3" --mode timing --chip "$2" > "$T/$1.out" 2> "$T/$1.err"; then
    fail "$1 on $2 exited non-zero: $(cat "$T/$1.err")"
    MFU=-1 BOUND=none ATT=-1
    return
  fi
  MFU=$(sed -n 's/.*MFU: \([0-9.]*\)%.*/\1/p' "$T/$1.out" | awk '{print $1 / 100}')
  BOUND=$(sed -n 's/^roofline: .*: \([a-z]*\)-bound;.*/\1/p' "$T/$1.out")
  ATT=$(sed -n 's/^roofline: .*achieved \([0-9.]*\)% of it.*/\1/p' "$T/$1.out" | awk '{print $1 / 100}')
  [ -n "$MFU" ] && [ -n "$BOUND" ] && [ -n "$ATT" ] || { fail "$1: summary not parsed: $(cat "$T/$1.out")"; MFU=-1 ATT=-1; }
}
lt() { awk -v a="$1" -v b="$2" 'BEGIN { exit !(a < b) }'; }

gemm 256 256 256 bf16 f32 "$T/small.hlo"
run small v5e "$T/small.hlo"
[ "$BOUND" = memory ] || fail "256^3 bf16 GEMM on v5e is $BOUND-bound, expected memory"
lt "$MFU" 0.25 || fail "256^3 bf16 GEMM on v5e: MFU $MFU, expected < 0.25"
lt 0 "$MFU" || fail "256^3 bf16 GEMM on v5e: MFU $MFU, expected > 0"

gemm 8192 8192 8192 bf16 f32 "$T/large.hlo"
for chip in v5e v5p; do
  run "large_$chip" "$chip" "$T/large.hlo"
  [ "$BOUND" = compute ] || fail "8192^3 bf16 GEMM on $chip is $BOUND-bound, expected compute"
  lt 0.9 "$MFU" || fail "8192^3 bf16 GEMM on $chip: MFU $MFU, expected > 0.9"
  lt "$MFU" 1.0001 || fail "8192^3 bf16 GEMM on $chip: MFU $MFU above peak"
done

# Skinny: 8 rows against an 8192x8192 weight is ~8 FLOP/B, bandwidth-limited.
gemm 8 8192 8192 bf16 f32 "$T/skinny.hlo"
run skinny v5p "$T/skinny.hlo"
[ "$BOUND" = memory ] || fail "8x8192x8192 on v5p is $BOUND-bound, expected memory"
lt "$MFU" 0.1 || fail "8x8192x8192 on v5p: MFU $MFU, expected < 0.1"
# (the roof is the published bandwidth; v5p's DMAs stream at its hbm_efficiency, 0.711 of it,
# and a matmul's reads at matmul_stream_efficiency, 0.862, of that: 0.613 of the roof, the
# XLA TPU cost model's rates: chips/v5p.json)
lt 0.55 "$ATT" || fail "8x8192x8192 on v5p: $ATT of the bandwidth roof, expected > 0.55"
lt "$ATT" 0.62 || fail "8x8192x8192 on v5p: $ATT of the bandwidth roof, expected < 0.62 (0.711 x 0.862)"

# TPU v1: one int8 FC layer at batch 200 (MLP0's batch) streams its weights from DDR3.
gemm 200 2048 2048 s8 s32 "$T/v1fc.hlo"
run v1fc v1 "$T/v1fc.hlo"
[ "$BOUND" = memory ] || fail "v1 int8 FC at batch 200 is $BOUND-bound, expected memory"
lt "$MFU" 0.2 || fail "v1 int8 FC at batch 200: MFU $MFU of the int8 peak, expected < 0.2"
grep -q "int8 peak" "$T/v1fc.out" || fail "v1 int8 program not measured against the int8 peak"

# The 70B per-chip step: far too large to compute, timed without values.
run llama v5p examples/llama70b_shard_step.hlo
grep -q "timing only" "$T/llama.out" || fail "llama step did not run timing only"
cyc=$(sed -n 's/^step time: .*(\([0-9]*\) cycles.*/\1/p' "$T/llama.out")
[ -n "$cyc" ] && lt 0 "$cyc" || fail "llama step: no cycle count"
lt 0 "$MFU" || fail "llama step: MFU $MFU"
if "$BIN" run examples/llama70b_shard_step.hlo --mode timing --chip v5e > "$T/l5e.out" 2> "$T/l5e.err"; then
  fail "llama step fits v5e's 16 GiB"
else
  grep -q "error: program needs [0-9]* bytes of HBM; v5e has 17179869184" "$T/l5e.err" ||
    fail "llama step on v5e: unexpected error: $(cat "$T/l5e.err")"
fi

[ "$fails" -eq 0 ] || { echo "$fails failure(s)"; exit 1; }
echo "sanity: ok"
