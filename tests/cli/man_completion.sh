# man_completion.sh - issue 19: the man pages, the bash completion, `npuc
# version` and the manual agree with --help.  For every command the flags
# are read from its --help here (a regex over the option lines, not npuc's
# own parser) and each must appear in the rendered page (man -l, the
# installed man's renderer), in the completion's list for that command, and
# in docs/cli.md (the command's section or the shared conventions).  The
# completion is sourced into a plain bash (no bash-completion package) and
# asked for a few prefixes; `version --json` is checked against the CPU's
# flags in /proc/cpuinfo and Python's zlib.
source "$(dirname "${BASH_SOURCE[0]}")/lib/cli_test.bash"

MANDIR="$NPUC_BUILD/share/man/man1"
COMP="$NPUC_BUILD/share/bash-completion/completions/npuc"
[ -f "$MANDIR/npuc.1" ] && [ -f "$COMP" ] || fail "the build did not make the man pages and completion"
command -v man >/dev/null || skip "no man program"

# The generated files are what the program makes now (nothing stale).
"$NPUC_BIN" __completion > "$T/comp" || fail "npuc __completion failed"
cmp -s "$T/comp" "$COMP" || fail "build/share completion differs from npuc __completion"
"$NPUC_BIN" __man --list > "$T/cmds" || fail "npuc __man --list failed"
"$NPUC_BIN" __man quantize | cmp -s - "$MANDIR/npuc-quantize.1" || fail "npuc-quantize.1 is stale"
pages=("$MANDIR/npuc.1")
for c in $(cat "$T/cmds"); do
    "$NPUC_BIN" "$c" --help > "$T/help.$c" || fail "npuc $c --help failed"
    pages+=("$MANDIR/npuc-$c.1")
done
# One man run renders every page (a man start costs most of a second).
MANWIDTH=200 MANPAGER=cat man -l "${pages[@]}" > "$T/man.all" 2> "$T/manerr" || true
"$PY" - "$T" <<'EOF'
import re, sys
T = sys.argv[1]
text = open(T + "/man.all").read()
# Each page starts with its title line "NPUC-QUANTIZE(1)   User Commands   NPUC-QUANTIZE(1)".
parts = re.split(r"(?m)^(NPUC(?:-[A-Z-]+)?)\(1\)\s+User Commands.*$", text)
for name, body in zip(parts[1::2], parts[2::2]):
    c = name.lower()[5:] if name != "NPUC" else "npuc"
    with open(T + "/man." + c, "a") as f:
        f.write(body)
EOF
for c in npuc $(cat "$T/cmds"); do
    [ -s "$T/man.$c" ] || fail "man -l rendered no page for $c: $(head -c 500 "$T/manerr")"
done
"$NPUC_BIN" --help > "$T/help.npuc"

"$PY" - "$T" "$NPUC_SRC/docs/cli.md" <<'EOF'
import re, sys
T, docs = sys.argv[1], open(sys.argv[2]).read()
cmds = open(T + "/cmds").read().split()
comp = open(T + "/comp").read()
secs = re.split(r"(?m)^## ", docs)
common = [s for s in secs if s.startswith("Conventions")][0]
assert len(cmds) >= 13 and "quantize" in cmds and "version" in cmds, cmds
top = open(T + "/man.npuc").read()
for c in cmds:
    assert re.search(r"^\s+%s\s" % re.escape(c), open(T + "/help.npuc").read(), re.M), c
    assert "npuc-%s(1)" % c in top, ("SEE ALSO lacks", c)
bad = []
total = 0
for c in cmds:
    help_ = open(T + "/help." + c).read()
    flags = set()
    for line in help_.splitlines():
        m = re.match(r"^ {2,}((?:-[A-Za-z], )?--[a-z0-9-]+)", line)
        if m:
            flags.update(re.findall(r"(?<![\w-])-{1,2}[A-Za-z0-9][a-z0-9-]*", m.group(1)))
    assert "--help" in flags, (c, flags)
    page = open(T + "/man." + c).read()
    m = re.search(r"^    %s\) opts='([^']*)';;$" % re.escape(c), comp, re.M)
    assert m, ("no completion entry for", c)
    copts = set(m.group(1).split())
    sec = [s for s in secs if s.startswith("npuc %s\n" % c)]
    assert sec, ("docs/cli.md has no section for", c)
    for f in sorted(flags):
        total += 1
        word = re.escape(f) + r"(?![a-z0-9-])"
        if not re.search(r"(?<![\w-])" + word, page): bad.append((c, f, "man page"))
        if f not in copts: bad.append((c, f, "completion"))
        if f.startswith("--") and not re.search(word, sec[0] + common): bad.append((c, f, "docs/cli.md"))
    # the page's NAME line is the summary npuc --help gives
    assert re.search(r"npuc-%s - " % re.escape(c), page), (c, page[:300])
assert not bad, bad
assert total > 150, total
print("flags checked:", total)
EOF
[ $? -eq 0 ] || fail "help, man pages, completion and docs disagree"

# ------------------------------------------------------------ completion
mkdir -p "$T/c/sub" && : > "$T/c/m.safetensors" && : > "$T/c/m.h5" && : > "$T/c/r.yaml" && : > "$T/c/x.txt" \
    && : > "$T/c/rep.html"
cat > "$T/comp.bash" <<'EOF'
source "$1"
comp() { COMP_WORDS=("$@"); COMP_CWORD=$((${#COMP_WORDS[@]}-1)); COMPREPLY=(); _npuc; printf '%s\n' "${COMPREPLY[@]}" | sort | tr '\n' ' '; echo; }
comp npuc qu
comp npuc quantize --gr
comp npuc quantize --range ""
comp npuc report --format h
comp npuc info m
comp npuc run ""
comp npuc quantize --report ""
comp npuc prune --
comp npuc ver
EOF
(cd "$T/c" && bash --norc --noprofile "$T/comp.bash" "$COMP") > "$T/got" 2> "$T/err" || fail "sourcing the completion failed"
must_be_empty "$T/err"
cat > "$T/want" <<'EOF'
quantize 
--grid --group-size 
entropy minmax mse percentile= 
html 
m.h5 m.safetensors 
r.yaml sub/ 
rep.html sub/ x.txt 
EOF
head -7 "$T/got" | diff "$T/want" - || fail "completions differ"
sed -n 8p "$T/got" | grep -q -- "--sparsity .*--" || fail "prune -- completes no flags: $(sed -n 8p "$T/got")"
sed -n 9p "$T/got" | grep -qx "version *" || fail "ver does not complete to version"

# ------------------------------------------------------------ version
expect_rc 0 "$NPUC_BIN" version --json
cp "$T/out" "$T/version.json"
expect_rc 0 "$NPUC_BIN" --version
must_match "$T/out" '^npuc [0-9]+\.[0-9]+\.[0-9]+ \(git [^,]+, [A-Za-z+]+ build\)$'
must_match "$T/out" '^formats: safetensors \(\.safetensors \.st\), hdf5 \(.*\.h5'
"$PY" - "$T/version.json" <<'EOF'
import json, sys, zlib, re
d = json.load(open(sys.argv[1]))
assert d["schema"] == "npuc.version/1", d
assert re.fullmatch(r"\d+\.\d+\.\d+", d["version"]), d["version"]
flags = set()
for line in open("/proc/cpuinfo"):
    if line.startswith("flags"):
        flags = set(line.split(":", 1)[1].split())
        break
want = ["ref"]
if {"avx2", "fma", "popcnt"} <= flags: want.append("avx2")
if "avx2" in want and {"avx512f", "avx512bw", "avx512dq"} <= flags: want.append("avx512")
assert d["simd"]["detected"] == want, (d["simd"], want)
assert d["simd"]["selected"] in d["simd"]["detected"]
assert d["libraries"]["zlib"] == zlib.ZLIB_RUNTIME_VERSION, (d["libraries"]["zlib"], zlib.ZLIB_RUNTIME_VERSION)
for k in ("hdf5", "lapack", "jansson", "libfyaml"):
    assert re.match(r"\d+\.\d+", d["libraries"][k]), (k, d["libraries"])
names = [f["name"] for f in d["formats"]]
assert names[:2] == ["safetensors", "hdf5"] and ".h5" in d["formats"][1]["extensions"], d["formats"]
assert "quant" in d["encodings"] and "lowrank" in d["encodings"], d["encodings"]
assert d["openmp"].isdigit() and int(d["openmp"]) >= 201107, d["openmp"]
EOF
[ $? -eq 0 ] || fail "version --json"

# The OpenBLAS kernels in use: those OpenBLAS itself reports in a process with
# the same environment, with OPENBLAS_CORETYPE and without it.
OPENBLAS_CORETYPE=Haswell "$NPUC_BIN" version --json >"$T/v1.json" || fail "version --json with OPENBLAS_CORETYPE"
env -u OPENBLAS_CORETYPE "$NPUC_BIN" version --json >"$T/v0.json" || fail "version --json without OPENBLAS_CORETYPE"
for v in 0 1; do
    if [ $v = 1 ]; then e=(env OPENBLAS_CORETYPE=Haswell); else e=(env -u OPENBLAS_CORETYPE); fi
    "${e[@]}" "$PY" - "$T/v$v.json" <<'EOF'
import ctypes, json, sys
try:
    lib = ctypes.CDLL("libopenblas.so.0")
except OSError:
    sys.exit(0)  # npuc's BLAS is not OpenBLAS here: nothing to compare with
lib.openblas_get_corename.restype = ctypes.c_char_p
own = lib.openblas_get_corename().decode()
got = json.load(open(sys.argv[1]))["libraries"]["openblas_core"]
assert got == own, (got, own)
EOF
    [ $? -eq 0 ] || fail "openblas_core (v$v)"
done
echo "man_completion: ok"
