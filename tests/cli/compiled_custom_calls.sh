#!/bin/sh
# Custom calls the XLA TPU compiler leaves inside its fusions in the programs it compiles:
# AllocateBuffer (a fusion's output buffer, then filled by a dynamic-update-slice) and
# AssumeGatherIndicesInBound (its operand passed on). They do no vector work of their own;
# before, the back end costed every fused custom call as a sort of its first operand and
# crashed on AllocateBuffer, which has none (families swin_fwd_b4_28x28x192h6_shift, v6e).
. tests/cli/lib/preamble.sh
cat > "$T/p.hlo" <<'HLO'
HloModule fused_custom_calls

%fused_alloc (p0: bf16[4,3,28,192]) -> bf16[4,28,28,192] {
  %buf = bf16[4,28,28,192]{3,2,1,0} custom-call(), custom_call_target="AllocateBuffer"
  %p0 = bf16[4,3,28,192]{3,2,1,0} parameter(0)
  %z = s32[] constant(0)
  ROOT %dus = bf16[4,28,28,192]{3,2,1,0} dynamic-update-slice(%buf, %p0, %z, %z, %z, %z)
}

%fused_idx (q0: s32[3072]) -> s32[3072] {
  %q0 = s32[3072]{0} parameter(0)
  %a = s32[3072]{0} custom-call(%q0), custom_call_target="AssumeGatherIndicesInBound"
  ROOT %n = s32[3072]{0} negate(%a)
}

ENTRY %main (x: bf16[4,3,28,192], i: s32[3072]) -> (bf16[4,28,28,192], s32[3072]) {
  %x = bf16[4,3,28,192]{3,2,1,0} parameter(0)
  %i = s32[3072]{0} parameter(1)
  %f = bf16[4,28,28,192]{3,2,1,0} fusion(%x), kind=kLoop, calls=%fused_alloc
  %g = s32[3072]{0} fusion(%i), kind=kLoop, calls=%fused_idx
  ROOT %t = (bf16[4,28,28,192]{3,2,1,0}, s32[3072]{0}) tuple(%f, %g)
}
HLO
for chip in v5e v6e; do
  TPUSIM_CACHE=off "$BIN" run "$T/p.hlo" --chip $chip --mode timing > "$T/out" 2> "$T/err"
  rc=$?
  [ $rc -eq 0 ] || { fail "$chip: exited $rc: $(tail -2 "$T/err")"; continue; }
  # the negate's 3,072 elements are the only vector work: a few registers, not a sort's stages
  grep -q "^step time:" "$T/out" || fail "$chip: no step time"
done
[ $fails -eq 0 ] && echo "compiled_custom_calls: ok"
exit $fails
