#!/usr/bin/env bash
# Issue 31, rough edges a user met (items 11-13): a report never lands on a
# model file; an output into a missing folder is exit 2 whichever flag names
# it; --help names every format the registry has and the pass commands'
# -v; repeated warnings come grouped.
source "$(dirname "$0")/lib/cli_test.bash"
cnn="$NPUC_SRC/samples/cnn_bn.safetensors"
"$NPUC_BIN" quantize -q "$cnn" -o "$T/q.safetensors" >/dev/null

# Item 11: `report A B -o A.safetensors -f` is refused, the model untouched;
# so is a model renamed to a report's extension; a report is replaced.
cp "$cnn" "$T/a.safetensors"
before=$(sha256sum <"$T/a.safetensors")
expect_rc 2 "$NPUC_BIN" report "$T/a.safetensors" "$T/q.safetensors" -o "$T/a.safetensors" -f
must_match "$T/err" 'a report is \.txt, \.md, \.csv, \.json or \.html, not a model'
cp "$cnn" "$T/model.txt"
expect_rc 2 "$NPUC_BIN" report "$T/a.safetensors" "$T/q.safetensors" -o "$T/model.txt" -f
must_match "$T/err" 'is a safetensors model, not a report'
cmp -s "$cnn" "$T/model.txt" || fail "report -f replaced a model named .txt"
expect_rc 2 "$NPUC_BIN" quantize "$cnn" -o "$T/q2.safetensors" --report "$T/model.txt"
expect_rc 2 "$NPUC_BIN" report "$T/a.safetensors" "$T/q.safetensors" -o "$T/r.bin"
[ "$(sha256sum <"$T/a.safetensors")" = "$before" ] || fail "a refused report changed the model"
echo old >"$T/r.json"
expect_rc 0 "$NPUC_BIN" report -q "$T/a.safetensors" "$T/q.safetensors" -o "$T/r.json" -f
"$PY" -c "import json,sys; json.load(open(sys.argv[1]))" "$T/r.json" || fail "-f did not replace an old report"
echo "item 11: a report never replaces a model"

# Item 13: a missing folder is exit 2 for -o, --report and --summary alike.
expect_rc 2 "$NPUC_BIN" quantize "$cnn" -o "$T/no/such/q.safetensors"
must_match "$T/err" "cannot write the output there: $T/no/such does not exist"
expect_rc 2 "$NPUC_BIN" convert "$cnn" -o "$T/no/such/c.h5"
expect_rc 2 "$NPUC_BIN" quantize "$cnn" -o "$T/q3.safetensors" --report "$T/no/such/r.json"
must_match "$T/err" "cannot write the report there: $T/no/such does not exist"
expect_rc 2 "$NPUC_BIN" report "$cnn" "$T/q.safetensors" -o "$T/no/such/r.json"
[ ! -e "$T/q3.safetensors" ] || fail "an output was published beside a report that cannot be written"
echo "item 13: a missing folder is exit 2 everywhere"

# Item 12: 24 warnings that differ only in the tensor (lowrank on 24
# depthwise kernels) are one line on stderr and in the report, with the
# count and every tensor.
"$PY" - "$T/dw.safetensors" <<'PY'
import json, struct, sys
import numpy as np
rng = np.random.default_rng(12)
t = {}
for i in range(24):
    t[f"blocks.{i}.dw.weight"] = rng.standard_normal((8, 1, 3, 3)).astype(np.float32)
    t[f"blocks.{i}.pw.weight"] = rng.standard_normal((8, 8, 1, 1)).astype(np.float32)
hdr, off, blobs = {}, 0, []
for k, v in t.items():
    hdr[k] = {"dtype": "F32", "shape": list(v.shape), "data_offsets": [off, off + v.nbytes]}
    off += v.nbytes
    blobs.append(v.tobytes())
h = json.dumps(hdr).encode()
h += b" " * (-len(h) % 8)
open(sys.argv[1], "wb").write(struct.pack("<Q", len(h)) + h + b"".join(blobs))
PY
expect_rc 0 "$NPUC_BIN" lowrank --rank 2 --include dw "$T/dw.safetensors" -o "$T/dwl.safetensors" --report "$T/dwl.json"
[ "$(grep -c 'depthwise kernel' "$T/err")" -eq 1 ] || fail "the depthwise warnings are not one line: $(grep -c 'depthwise kernel' "$T/err")"
"$PY" - "$T/err" "$T/dwl.json" <<'PY' || fail "the grouped warning does not list the 24 tensors"
import json, re, sys
want = ", ".join(f"'blocks.{i}.dw.weight'" for i in range(24))
line = [l for l in open(sys.argv[1]) if "depthwise kernel" in l][0]
assert f"(24 tensors: {want})" in line, line
ws = [w for w in json.load(open(sys.argv[2]))["warnings"] if "depthwise kernel" in w]
assert len(ws) == 1 and f"(24 tensors: {want})" in ws[0], ws
PY
echo "item 12: 24 repeated warnings are one line with the count and the tensors"

# Item 13: --help names every format of the registry (read from the rows'
# sources here) with its extensions; the pass commands' --help lists -v.
"$NPUC_BIN" --help >"$T/help.main"
"$NPUC_BIN" info --help >"$T/help.info"
n=0
for row in "$NPUC_SRC"/formats/*/*_format.c; do
    name=$(sed -n 's/^ *\.name = "\([a-z0-9_-]*\)",.*/\1/p' "$row" | head -1)
    [ -n "$name" ] || continue
    n=$((n + 1))
    exts=$(sed -n 's/^static const char \*const [A-Z0-9_]*_EXT\[\] = {\(.*\)NULL};/\1/p' "$row" | tr -d '",')
    for h in main info; do
        line=$(grep -E "^  $name " "$T/help.$h") || fail "npuc $h --help does not list the format $name"
        for e in $exts; do [[ " $line " == *" $e "* ]] || fail "--help: $name without its extension $e: $line"; done
    done
done
[ "$n" -ge 5 ] || fail "found only $n format rows under formats/"
! grep -q 'safetensors, HDF5/Keras)' "$T/help.main" || fail "npuc --help still names two formats only"
for c in quantize prune sparsify lowrank fold-bn; do
    "$NPUC_BIN" "$c" --help > "$T/help.$c" # not piped into grep -q: its early exit is SIGPIPE under pipefail
    grep -qE '^ +-v, --verbose' "$T/help.$c" || fail "npuc $c --help does not list -v"
done
echo "item 13: --help lists the $n registry formats and -v"

# Item 13: fold-bn's total says how many tensors go in and come out (the
# output's count, read back by the safetensors header here); a prune note
# names --round-to only when it was given.
expect_rc 0 "$NPUC_BIN" fold-bn "$cnn" -o "$T/f.safetensors"
nout=$("$PY" -c "import json,struct,sys; f=open(sys.argv[1],'rb'); n=struct.unpack('<Q',f.read(8))[0]; print(len([k for k in json.loads(f.read(n)) if k!='__metadata__']))" "$T/f.safetensors")
nin=$("$PY" -c "import json,struct,sys; f=open(sys.argv[1],'rb'); n=struct.unpack('<Q',f.read(8))[0]; print(len([k for k in json.loads(f.read(n)) if k!='__metadata__']))" "$cnn")
must_match "$T/out" "^total: $nin tensors in, $nout out,"
expect_rc 0 "$NPUC_BIN" prune "$cnn" -o "$T/p.safetensors" --structured filter --sparsity 0.05
must_match "$T/out" 'keeps all 8 channels \(sparsity 0\.05\)\)'
! grep -q 'round-to' "$T/out" || fail "a prune note names --round-to, which was not given"
expect_rc 0 "$NPUC_BIN" prune "$cnn" -o "$T/p.safetensors" -f --structured filter --sparsity 0.05 --round-to 8
must_match "$T/out" 'keeps all 8 channels \(sparsity 0\.05, --round-to 8\)'
echo "item 13: fold-bn counts in and out; --round-to named only when given"
