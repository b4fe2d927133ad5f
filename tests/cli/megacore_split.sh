#!/bin/sh
# A megacore chip (v4, v5p: two TensorCores as one device) splits a kernel's tiles between its
# cores, each tile in its own core's VMEM: the XLA TPU compiler times a v4 megacore dot at
# half its one-core cycles (bf16 [26624,6144] x [6144,24576]: 34,598,776 against 69,183,976;
# libtpu compile-only, chip_config_name "megacore" against the default; docs/plan.md). tpusim's
# `v4` must take about half of `v4:core` on that dot, no less: with both cores' VMEM pooled for
# one kernel's tiles (before) it took 0.446 of it, its tiles twice a core's.
. tests/cli/lib/preamble.sh
cat > "$T/up.hlo" <<'HLO'
HloModule up
ENTRY e {
  a = bf16[26624,6144] parameter(0)
  b = bf16[6144,24576] parameter(1)
  ROOT d = bf16[26624,24576] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}
HLO
cyc() { "$BIN" run "$T/up.hlo" --mode timing --chip "$1" | sed -n 's/^step time: .*(\([0-9]*\) cycles.*/\1/p'; }
mc=$(cyc v4)
one=$(cyc v4:core)
[ -n "$mc" ] && [ -n "$one" ] || fail "no step time (v4: '$mc', v4:core: '$one')"
if [ -n "$mc" ] && [ -n "$one" ]; then
  awk -v m="$mc" -v o="$one" 'BEGIN { r = m / o; printf "megacore / one core: %d / %d = %.3f\n", m, o, r; exit !(r >= 0.49 && r <= 0.53) }' ||
    fail "v4 megacore dot not half of one core's cycles"
fi
[ "$fails" = 0 ] || exit 1
echo "megacore_split: ok"
