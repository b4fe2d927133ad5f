#!/bin/sh
# Every CLI run starts a process, and its start-up is each warm run's floor (issue 36). In a
# virtual machine each cpuid instruction traps to the hypervisor (5-20 us here): glibc's own
# start runs 41 of them, which nothing can skip, and libgcc's CPU probe (__cpu_indicator_init,
# linked by __builtin_cpu_supports or target_clones) 10 more. With glibc 2.33 or later the
# kernels read glibc's detection (src/base/cpu.h), so tpusim must not carry libgcc's probe.
. tests/cli/lib/preamble.sh
command -v readelf > /dev/null 2>&1 || { echo "skip: no readelf"; exit 77; }
v=$(getconf GNU_LIBC_VERSION 2> /dev/null | sed -n 's/^glibc \([0-9]*\)\.\([0-9]*\).*/\1 \2/p')
[ -n "$v" ] || { echo "skip: not glibc"; exit 77; }
set -- $v
[ "$1" -gt 2 ] || [ "$2" -ge 33 ] || { echo "skip: glibc $1.$2 (before 2.33)"; exit 77; }
case "$(uname -m)" in x86_64) ;; *) echo "skip: not x86-64"; exit 77 ;; esac
readelf -sW "$BIN" > "$T/syms" 2>&1 || fail "readelf -s $BIN"
[ -s "$T/syms" ] || fail "readelf -s $BIN printed nothing"
if grep -q " __cpu_indicator_init\$\| __cpu_model\$" "$T/syms"; then
  fail "tpusim links libgcc's CPU probe (10 cpuid at every start): $(grep -c . "$T/syms") symbols"
fi
"$BIN" --version > "$T/out" 2>&1 || fail "--version: $(cat "$T/out")"
[ "$fails" = 0 ] || exit 1
