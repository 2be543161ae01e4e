# arch_rules.sh - the dependency and export rules of docs/ARCHITECTURE.md,
# checked on the tree and the built library rather than trusted:
#   - libnpuc.so exports only the public API: no npuc__* symbol, and every
#     exported function is declared with NPUC_API in include/npuc/;
#   - the CLI includes only <npuc/*.h> and its own headers;
#   - no file under src/core/ includes a formats/ header (core reaches the
#     formats only through the registry table), nor pipeline/ or passes/.
#   - part-name suffixes (".scale", ".lr_a"...) and encoding names of new
#     artifact entries appear only in src/codecs (the codec table).
source "$(dirname "${BASH_SOURCE[0]}")/lib/cli_test.bash"

lib="$NPUC_BUILD/libnpuc.so"
[ -f "$lib" ] || fail "$lib not built"
command -v nm >/dev/null || skip "nm not installed"

# ---------------------------------------------------------------- exports
nm -D --defined-only "$lib" | awk '$2 ~ /^[TDBRVW]$/ {print $3}' | sort -u >"$T/exports"
[ -s "$T/exports" ] || fail "nm lists no exported symbol in $lib"
if grep -q '^npuc__' "$T/exports"; then
    grep '^npuc__' "$T/exports" | head -20 >&2
    fail "libnpuc.so exports $(grep -c '^npuc__' "$T/exports") private npuc__ symbols"
fi
# What the headers declare as exported.
grep -ho 'NPUC_API[^(]*\bnpuc_[a-z0-9_]*[[:space:]]*(' "$NPUC_SRC"/include/npuc/*.h |
    grep -o 'npuc_[a-z0-9_]*[[:space:]]*($' | tr -d ' (' | sort -u >"$T/declared"
[ -s "$T/declared" ] || fail "no NPUC_API declaration found in include/npuc"
# Every exported npuc symbol is declared public.  The only other exports
# allowed are the toolchain's: GCC gives each named `#pragma omp critical`
# a global lock ".gomp_critical_user_<name>" that must be shared by every
# object using that name, so it cannot be hidden.
grep '^npuc_' "$T/exports" >"$T/npuc_exports" || true
extra=$(comm -23 "$T/npuc_exports" "$T/declared")
[ -z "$extra" ] || fail "exported but not declared NPUC_API in include/npuc: $(echo $extra)"
missing=$(comm -13 "$T/npuc_exports" "$T/declared")
[ -z "$missing" ] || fail "declared NPUC_API but not exported (or not defined): $(echo $missing)"
others=$(grep -v '^npuc_' "$T/exports" | grep -v '^_init$\|^_fini$\|^\.gomp_critical_user_' || true)
[ -z "$others" ] || fail "libnpuc.so exports non-npuc symbols: $(echo $others | head -c 400)"

# Every public header carries extern "C" guards (or only includes others).
for h in "$NPUC_SRC"/include/npuc/*.h; do
    case "$(basename "$h")" in npuc.h|api.h) continue ;; esac
    grep -q 'extern "C"' "$h" || fail "$h has no extern \"C\" guard"
done

# ---------------------------------------------------------------- includes
# The CLI is a client of the public API only.
bad=$(grep -Hn '#include "' "$NPUC_SRC"/src/cli/*.c "$NPUC_SRC"/src/cli/*.h |
      grep -v '#include "cli_[a-z_]*\.h"' || true)
[ -z "$bad" ] || fail "src/cli includes a private header: $bad"

# Core reaches the formats only through the registry (src/core/format_row.h,
# table in formats/format_registry.c): no file under src/core/ includes a
# header from formats/, whether spelled with the folder ("formats/...",
# "hdf5/h5_common.h", "safetensors/...") or by a file name that only a
# formats/ folder has (h5_*.h, st_*.h, or any header found under formats/).
fmt_dirs=$(cd "$NPUC_SRC/formats" && find . -mindepth 1 -maxdepth 1 -type d -printf '%f\n')
fmt_headers=$(cd "$NPUC_SRC/formats" && find . -name '*.h' -printf '%f\n')
bad=""
while IFS= read -r line; do
    [ -n "$line" ] || continue
    inc=$(printf '%s\n' "$line" | sed -E 's/.*#[[:space:]]*include[[:space:]]*[<"]([^>"]*)[>"].*/\1/')
    base=${inc##*/}
    first=${inc%%/*}
    hit=0
    case "$inc" in *formats/*) hit=1 ;; esac
    case "$base" in h5_*.h|st_*.h) hit=1 ;; esac
    [ "$inc" != "$first" ] && printf '%s\n' "$fmt_dirs" | grep -qxF "$first" && hit=1
    printf '%s\n' "$fmt_headers" | grep -qxF "$base" && hit=1
    [ "$hit" = 1 ] && bad="$bad $line"
done < <(grep -HnE '^[[:space:]]*#[[:space:]]*include' "$NPUC_SRC"/src/core/*.c "$NPUC_SRC"/src/core/*.h)
[ -z "$bad" ] || fail "src/core includes a formats/ header (use the registry, format_row.h):$bad"
# ---------------------------------------------------------------- codecs
# The suffixes of an encoding's stored parts and the encoding names an entry
# is written with are spelled in the codec table only (src/codecs/codec.h):
# passes, decoders, validate and reports ask its rows.
bad=$(grep -rn '"\.scale"\|"\.zero_point"\|"\.lr_a"\|"\.lr_b"\|"\.nm_meta"' \
          "$NPUC_SRC"/src "$NPUC_SRC"/formats "$NPUC_SRC"/calib | grep -v "^$NPUC_SRC/src/codecs/" || true)
[ -z "$bad" ] || fail "a part suffix is spelled outside src/codecs: $bad"
bad=$(grep -rn 'npuc__art_add([^;]*"' "$NPUC_SRC"/src "$NPUC_SRC"/formats "$NPUC_SRC"/calib || true)
[ -z "$bad" ] || fail "an artifact entry's encoding is spelled instead of taken from its codec row: $bad"

# Issue 31 item 15: payloads are read with pread(2) (readahead(2) for the
# prefetch): no header or pass comment may still say they come from an mmap
# or are populated with MADV_POPULATE_READ, and only kernels.c chooses a
# kernel table (no other file calls two tables' accessors to pick one).
for f in include/npuc/model.h formats/safetensors/st_format.h src/pipeline/readahead.h \
         src/passes/pass_util.h src/passes/pass_util.c src/passes/quantize/quantize_model.c; do
    if grep -nE 'mmap|MADV_POPULATE|mapped (bytes|file|tensor|data)' "$NPUC_SRC/$f" >"$T/mm"; then
        fail "$f still describes mapped payloads: $(cat "$T/mm")"
    fi
done
# A chooser asks for a fast table and falls back to the reference: both calls in one file.
for f in $(grep -rlE 'npuc_[a-z]*kernels_(avx512|avx2|f16c|sse2)\(\)' "$NPUC_SRC/src" "$NPUC_SRC/formats" "$NPUC_SRC/calib"); do
    [[ $f == */src/kernels/kernels.c ]] && continue
    grep -qE 'npuc_[a-z]*kernels_ref\(\)' "$f" && echo "$f"
done >"$T/choosers"
[ ! -s "$T/choosers" ] || fail "kernel tables chosen outside src/kernels/kernels.c: $(cat "$T/choosers")"
grep -qE '__builtin_cpu_supports *\(' -r "$NPUC_SRC/src" "$NPUC_SRC/formats" &&
    fail "__builtin_cpu_supports is back (clang 14 rejects some of its feature strings: kernels/cpu_x86.h)"
echo "item 15: no mmap / MADV_POPULATE_READ payload comments; one place chooses kernels"

# Issue 31 item 16: FNV-1a is written once (src/core/strmap.c): its primes
# appear in no other source file.
grep -rlE '1099511628211|16777619' "$NPUC_SRC/src" "$NPUC_SRC/formats" "$NPUC_SRC/calib" |
    grep -v '/src/core/strmap\.c$' >"$T/fnv" || true
[ ! -s "$T/fnv" ] || fail "FNV-1a typed again outside src/core/strmap.c: $(cat "$T/fnv")"
echo "item 16: one FNV-1a"

# Issue 31 item 16: option bounds live in the option tables (and the N:M
# bounds in sparsify_nm.h); the passes' C-API checks read them from there.
grep -rnE '1 <= N < M <= 16|(bits|b) < 2 \|\| (p->bits|bits|b) > 8|damp > 0 && ' "$NPUC_SRC/src/passes" |
    grep -vE 'sparsify/sparsify_nm\.h:|_desc\.c:' >"$T/bounds" || true
[ ! -s "$T/bounds" ] || fail "option bounds typed again outside the option tables: $(cat "$T/bounds")"
echo "item 16: option bounds in one place"
