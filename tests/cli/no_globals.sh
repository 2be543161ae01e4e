#!/usr/bin/env bash
# Issue 15, thread safety: the library keeps no mutable global state besides
# what is listed here, read from the static library's symbol table (objects
# in .data / .bss, not the read-only .data.rel.ro / .rodata), so a new global
# fails this test until it is justified:
#  - tempfiles.c: the temporary-file registry a signal handler walks (it can
#    reach nothing else: docs/security.md), and the fallback random counter
#    (atomic);
#  - kernels.c, nm_avx2.c, recipe_steps.c: dispatch and lookup tables (and the
#    CPU probe's answer, kernels.c) filled
#    once under pthread_once and read-only after;
#  - h5_common.c: libhdf5 is not thread-safe; the one lock every HDF5 call
#    holds and the pthread_once that calls H5dont_atexit before the first.
# tests/unit/test_threads.c shows the same from the outside: two reports and
# two recipe runs in threads give what each gives alone.
source "$(dirname "$0")/lib/cli_test.bash"
command -v objdump >/dev/null || skip "objdump is not installed"
lib="${NPUC_BUILD:?}/libnpuc.a"
[ -f "$lib" ] || skip "no static library at $lib"

objdump -t "$lib" | awk '
    /^[^ ]+\.o:/ { obj = $1; sub(/:$/, "", obj) }
    / O \.(data|bss)([ \t]|\.[^r])/ { print obj, $NF }' |
    grep -vE ' (__|\.)' >"$T/globals"   # compiler/sanitizer/coverage own
[ -s "$T/globals" ] || fail "objdump found no writable object at all (is $lib a static library?)"
allowed='^(tempfiles\.c\.o (g_state|g_path|counter\.[0-9]+)|kernels\.c\.o (g_quant|g_nm|g_calib|g_cvt|g_gguf|g_kq|g_once|g_cpu|g_cpu_once)|nm_avx2\.c\.o (g_pack_lut|g_pack_once)|recipe_steps\.c\.o (DEFS|defs_once)|h5_common\.c\.o (g_lock|g_once))$'
if grep -vE "$allowed" "$T/globals" >"$T/bad"; then
    fail "mutable globals in the library (make them per-context, or justify them here):
$(cat "$T/bad")"
fi
# The allowed ones are really there (the filter is not vacuous).
grep -q '^tempfiles\.c\.o g_state$' "$T/globals" || fail "objdump output not understood: $(head -5 "$T/globals")"
echo ok
