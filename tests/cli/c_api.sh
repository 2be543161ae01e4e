# c_api.sh - issue 19, the library as a product: (1) every public header's
# example (the block after "Example (compiled by tests/cli/c_api.sh):")
# compiles against include/ with -Wall -Werror, and every public function is
# documented (tests/cli/lib/header_docs.py: ownership, errors); (2) `cmake --install` into a
# temporary prefix gives a working `pkg-config npuc`, the man pages and the
# completion, and samples/c-api/quantize_one.c builds against the installed
# library only and runs: its SQNR is checked against NumPy's on the artifact
# it wrote (codes * scale), and an unknown tensor exits 2.
source "$(dirname "${BASH_SOURCE[0]}")/lib/cli_test.bash"

CC="${CC:-cc}"
command -v "$CC" >/dev/null || skip "no C compiler"
SAN=""
grep -q '^NPUC_SANITIZE:BOOL=ON' "$NPUC_BUILD/CMakeCache.txt" 2>/dev/null && SAN="-fsanitize=address,undefined"

# ------------------------------------------------------------ header examples
"$PY" - "$NPUC_SRC/include/npuc" "$T/examples.c" <<'EOF' || fail "extracting the header examples"
import glob, os, re, sys
inc, out = sys.argv[1], sys.argv[2]
src = ["#include <stdio.h>", "#include <stdlib.h>", "#include <npuc/npuc.h>",
       "/* The names the examples use without declaring them. */",
       "static npuc_ctx *ctx; static npuc_model *m, *orig, *compressed, *model;",
       "static const float *x, *w; static size_t n, i; static npuc_summary summary;"]
count = 0
for h in sorted(glob.glob(inc + "/*.h")):
    text = open(h).read()
    for mk in re.finditer(r"^ \* Example \(compiled by tests/cli/c_api\.sh\):\n((?: \*     .*\n)+)", text, re.M):
        body = "".join(l[3:] + "\n" for l in mk.group(1).splitlines())
        count += 1
        name = os.path.basename(h)[:-2]
        src += ["#line %d \"%s\"" % (text[:mk.start(1)].count("\n") + 1, os.path.basename(h)),
                "int example_%s_%d(void);" % (name, count), "int example_%s_%d(void) {" % (name, count), body,
                "    return 0;", "}"]
assert count >= 17, count
src.append("int main(void) { return 0; }")
open(out, "w").write("\n".join(src) + "\n")
EOF
"$CC" -std=c11 -D_POSIX_C_SOURCE=200809L -Wall -Wextra -Werror -Wno-unused-variable -Wno-unused-but-set-variable \
    -I"$NPUC_SRC/include" -fsyntax-only "$T/examples.c" 2> "$T/cc.err" \
    || { cat "$T/cc.err" >&2; fail "a header example does not compile"; }

# ------------------------------------------------------------ header documentation
"$PY" "$TESTLIB/header_docs.py" "$NPUC_SRC/include/npuc" > "$T/docs.out" \
    || { cat "$T/docs.out" >&2; fail "public declarations without ownership/error documentation"; }

# ------------------------------------------------------------ install + sample
command -v pkg-config >/dev/null || skip "no pkg-config"
cmake --install "$NPUC_BUILD" --prefix "$T/prefix" > "$T/install.log" 2>&1 \
    || { cat "$T/install.log" >&2; fail "cmake --install failed"; }
PC=$(find "$T/prefix" -name npuc.pc | head -1)
[ -n "$PC" ] || fail "no npuc.pc installed"
[ -f "$T/prefix/share/man/man1/npuc-quantize.1" ] || fail "man pages not installed"
[ -f "$T/prefix/share/bash-completion/completions/npuc" ] || fail "completion not installed"
[ -f "$T/prefix/include/npuc/build.h" ] || fail "headers not installed"
export PKG_CONFIG_PATH="$(dirname "$PC")"
flags=$(pkg-config --cflags --libs npuc) || fail "pkg-config npuc failed"
case "$flags" in *"$NPUC_SRC"*|*"$NPUC_BUILD"*) fail "pkg-config points into the source or build tree: $flags";; esac
libdir=$(pkg-config --variable=libdir npuc)
"$CC" -std=c11 -Wall -Wextra -Werror $SAN "$NPUC_SRC/samples/c-api/quantize_one.c" $flags -Wl,-rpath,"$libdir" \
    -o "$T/quantize_one" 2> "$T/cc.err" || { cat "$T/cc.err" >&2; fail "the sample does not build"; }
# ldd into a file, then grep: `ldd | grep -q` under pipefail fails when grep
# exits at its match while ldd still writes (SIGPIPE), as seen under ASan.
ldd "$T/quantize_one" >"$T/ldd.out" || fail "ldd failed on the sample"
grep -q "$libdir/libnpuc.so" "$T/ldd.out" || fail "the sample is not linked to the installed libnpuc: $(cat "$T/ldd.out")"
expect_rc 0 "$T/quantize_one" "$SAMPLES/cnn_bn.safetensors" features.3.weight "$T/one.safetensors"
must_match "$T/out" '^features\.3\.weight: 16 scales, sqnr [0-9.]+ dB'
must_match "$T/out" '^wrote .*one\.safetensors: '
"$PY" - "$TESTLIB" "$SAMPLES/cnn_bn.safetensors" "$T/one.safetensors" "$T/out" <<'EOF' || fail "the sample's artifact"
import re, sys
import numpy as np
sys.path.insert(0, sys.argv[1])
import npuc_test
def tensors(p):
    meta, ts = npuc_test.read_st(p)
    return meta, {n: (dt, shape, b) for n, dt, shape, b in ts}
_, a = tensors(sys.argv[2])
meta, q = tensors(sys.argv[3])
dt, shape, b = a["features.3.weight"]
w = np.frombuffer(b, np.float32).reshape(shape).astype(np.float64)
cdt, cshape, cb = q["features.3.weight"]
assert cdt == "I8" and cshape == shape, (cdt, cshape)
codes = np.frombuffer(cb, np.int8).reshape(shape).astype(np.float64)
sdt, sshape, sb = q["features.3.weight.scale"]
scale = np.frombuffer(sb, np.float32).astype(np.float64).reshape(-1)
assert scale.size == 16, sshape
deq = codes * scale.reshape(16, 1, 1, 1)
sqnr = 10 * np.log10((w ** 2).sum() / ((deq - w) ** 2).sum())
got = float(re.search(r"sqnr ([0-9.]+) dB", open(sys.argv[4]).read()).group(1))
assert abs(got - sqnr) < 0.01, (got, sqnr)
# only that tensor was quantized
others = [n for n, (d, s, _) in q.items() if d == "I8"]
assert others == ["features.3.weight"], others
EOF
expect_rc 2 "$T/quantize_one" "$SAMPLES/cnn_bn.safetensors" no.such.tensor "$T/two.safetensors"
must_match "$T/err" "no tensor 'no.such.tensor'"
[ ! -e "$T/two.safetensors" ] || fail "a failed run wrote its output"
echo "c_api: ok"
