#!/usr/bin/env bash
# Issue 15, budgets and read errors of the files npuc reads besides weights
# (docs/security.md):
#  - a pairs file (fold-bn --pairs) or graph file (prune --graph) that cannot
#    be read (a folder), that is larger than 64 MiB, or whose "next" list is
#    longer than 4095 bytes or holds a non-name: an error naming the file,
#    never a file silently cut short, nothing written;
#  - a batch list with a line longer than 4096 bytes, or /dev/zero: exit 2
#    at once (a fixed line buffer, not the whole file in memory);
#  - N:M patterns are two small decimals: "4294967297:4294967300" (a long
#    that would wrap to 1:4 as an int), signs, spaces: exit 2, on the command
#    line and in a recipe;
#  - a folded artifact whose npuc.bnfold record claims 16M channels makes
#    `npuc report` allocate no more than its real tensors need (run under a
#    400 MB address-space limit, where the claim would need 870 MB).
source "$(dirname "$0")/lib/cli_test.bash"
"$PY" -c "import numpy" 2>/dev/null || skip "numpy is not installed for $PY"
cnn="$SAMPLES/cnn_bn.safetensors"
in_sum=$(sha256sum "$cnn")
mkdir "$T/dir"

# ---- pairs and graph files
expect_rc 1 "$NPUC_BIN" fold-bn "$cnn" -o "$T/f.safetensors" --pairs "$T/dir"
must_match "$T/err" "^npuc: error: $T/dir: read error: Is a directory$"
expect_rc 1 "$NPUC_BIN" prune "$cnn" -o "$T/p.safetensors" --structured filter --sparsity 0.5 --graph "$T/dir"
must_match "$T/err" "^npuc: error: --graph $T/dir: read error: Is a directory$"
truncate -s $((64 * 1024 * 1024 + 1)) "$T/huge.txt"
expect_rc 2 "$NPUC_BIN" fold-bn "$cnn" -o "$T/f.safetensors" --pairs "$T/huge.txt"
must_match "$T/err" "huge\.txt: pairs file larger than 64 MiB"
expect_rc 2 "$NPUC_BIN" prune "$cnn" -o "$T/p.safetensors" --structured filter --sparsity 0.5 --graph "$T/huge.txt"
must_match "$T/err" "--graph .*huge\.txt: graph file larger than 64 MiB"
# Exactly 64 MiB is read (and then refused for what it holds, not its size).
truncate -s $((64 * 1024 * 1024)) "$T/edge.txt"
expect_rc 2 "$NPUC_BIN" fold-bn "$cnn" -o "$T/f.safetensors" --pairs "$T/edge.txt"
must_not_match "$T/err" "larger than"
"$PY" - "$T" <<'PY'
import json, sys
t = sys.argv[1]
names = ["features.3.weight"] + ["x%04d" % i for i in range(900)]  # 900 * 6 bytes > 4095
json.dump({"next": {"features.0.weight": names}}, open(t + "/long.json", "w"))
json.dump({"next": {"features.0.weight": "y" * 5000}}, open(t + "/longs.json", "w"))
json.dump({"next": {"features.0.weight": ["features.3.weight", 7]}}, open(t + "/mixed.json", "w"))
PY
expect_rc 2 "$NPUC_BIN" prune "$cnn" -o "$T/p.safetensors" --structured filter --sparsity 0.5 --graph "$T/long.json"
must_match "$T/err" "long\.json: \"next\" of 'features\.0\.weight' is longer than 4095 bytes"
expect_rc 2 "$NPUC_BIN" prune "$cnn" -o "$T/p.safetensors" --structured filter --sparsity 0.5 --graph "$T/longs.json"
must_match "$T/err" "longs\.json: \"next\" of 'features\.0\.weight' is longer than 4095 bytes"
expect_rc 2 "$NPUC_BIN" prune "$cnn" -o "$T/p.safetensors" --structured filter --sparsity 0.5 --graph "$T/mixed.json"
must_match "$T/err" "mixed\.json: \"next\" of 'features\.0\.weight' is not a name or list"
[ ! -e "$T/f.safetensors" ] && [ ! -e "$T/p.safetensors" ] || fail "a refused run wrote its output"

# ---- batch lists
head -c 5000 /dev/zero | tr '\0' a >"$T/list.txt"
expect_rc 2 "$NPUC_BIN" batch "$SAMPLES/recipes/int8_per_channel.yaml" --input "$T/list.txt" --output "$T/bo" -q
must_match "$T/err" "list\.txt:1: line longer than 4096 bytes"
expect_rc 2 timeout 10 "$NPUC_BIN" batch "$SAMPLES/recipes/int8_per_channel.yaml" --input /dev/zero --output "$T/bo" -q
must_match "$T/err" "/dev/zero:1: line longer than 4096 bytes"
# 4096 bytes is still a path (one that does not exist: the file fails, the list is read).
printf '%s.safetensors\n' "$(head -c 4084 /dev/zero | tr '\0' b)" >"$T/list4096.txt"
[ "$(head -1 "$T/list4096.txt" | wc -c)" = 4097 ] || fail "list4096.txt is not a 4096-byte line"
expect_rc 1 "$NPUC_BIN" batch "$SAMPLES/recipes/int8_per_channel.yaml" --input "$T/list4096.txt" --output "$T/bo" -q
must_not_match "$T/err" "line longer"

# ---- N:M patterns
for p in 4294967297:4294967300 4294967298:4 99999999999999999999:4 " 2:4" "+2:4" "2:+4" "2:4 " 2:04x 002:4 ":4" "2:"; do
    for cmd in sparsify quantize; do
        expect_rc 2 "$NPUC_BIN" $cmd "$cnn" -o "$T/nm.safetensors" --pattern "$p"
        must_match "$T/err" "is not an N:M pattern|not N:M|expected N:M"
    done
done
expect_rc 0 "$NPUC_BIN" sparsify "$cnn" -o "$T/nm.safetensors" --pattern 02:04 -q
expect_rc 0 "$NPUC_BIN" sparsify "$cnn" -o "$T/nm2.safetensors" --pattern 2:4 -q
cmp -s "$T/nm.safetensors" "$T/nm2.safetensors" || fail "02:04 is not 2:4"
printf 'steps:\n  - sparsify:\n      pattern: "4294967297:4294967300"\n' >"$T/nm.yaml"
expect_rc 2 "$NPUC_BIN" run "$T/nm.yaml" "$cnn" -o "$T/nm3.safetensors"
must_match "$T/err" "nm\.yaml:3:.*4294967297:4294967300"
[ ! -e "$T/nm3.safetensors" ] || fail "the recipe with a bad pattern wrote its output"

# ---- a channel count claimed by an artifact's fold record
"$NPUC_BIN" fold-bn "$cnn" -o "$T/fold.safetensors" -q >/dev/null
"$PY" - "$T/fold.safetensors" "$T/claim.safetensors" <<'PY'
import json, struct, sys
src, dst = sys.argv[1:]
b = open(src, "rb").read()
n = struct.unpack("<Q", b[:8])[0]
hdr = json.loads(b[8:8 + n])
rec = json.loads(hdr["__metadata__"]["npuc.bnfold"])
for p in rec["pairs"]:
    p["channels"] = 1 << 24
hdr["__metadata__"]["npuc.bnfold"] = json.dumps(rec)
h = json.dumps(hdr).encode()
h += b" " * ((8 - len(h) % 8) % 8)
open(dst, "wb").write(struct.pack("<Q", len(h)) + h + b[8 + n:])
PY
# An address-space limit needs the plain binary: not a wrapper script (valgrind), not a
# sanitizer build (ASan reserves terabytes of address space).
# NPUC_BIN is the input guard (tests/cli/lib/npuc_wrap.c); the real binary says
# whether it is sanitized, and under NPUC_VALGRIND=1 the guard runs valgrind.
real="${NPUC_REAL_BIN:-$NPUC_BIN}"
if [ "${NPUC_VALGRIND:-0}" = 1 ] || [ "$(head -c 4 "$real" | od -An -c | tr -d ' ')" != '177ELF' ] ||
    grep -q __asan_init "$real" 2>/dev/null || { ldd "$real" 2>/dev/null | grep 'libasan\|libtsan' >/dev/null; }; then
    echo "note: address-space limit skipped (sanitizer build or wrapped binary)" >&2
    "$NPUC_BIN" report "$cnn" "$T/claim.safetensors" >"$T/out" || fail "report on the claiming artifact failed"
else
    OMP_NUM_THREADS=1 "$PY" - "$NPUC_BIN" "$cnn" "$T/claim.safetensors" "$T/out" <<'PY' || fail "report under 400 MB: $(cat "$T/out")"
import resource, subprocess, sys
npuc, a, b, out = sys.argv[1:]
lim = 400 << 20
def limit():
    resource.setrlimit(resource.RLIMIT_AS, (lim, lim))
r = subprocess.run([npuc, "report", a, b, "-j", "1"], stdout=open(out, "w"), stderr=subprocess.STDOUT,
                   preexec_fn=limit)
sys.exit(r.returncode)
PY
fi
# The claim does not fit the tensors: the folds are compared raw, and said so.
must_match "$T/out" "bad channel or group count|compared raw|raw"

[ "$(sha256sum "$cnn")" = "$in_sum" ] || fail "the input changed"
echo ok
