# checkpoints.sh - Hugging Face sharded checkpoints (docs/checkpoints.md),
# checked by an independent reader of the layout (tests/cli/lib/ckpt_check.py):
#   - a 3-shard checkpoint (index, config.json, tokenizer files,
#     generation_config.json), given as its directory or its index, through
#     quantize and decompress equals, tensor for tensor, the same tensors in
#     one safetensors file through the same commands;
#   - the output keeps the input's shards, its index validates (each tensor
#     in exactly one shard, total_size right), side files are byte for byte;
#   - --max-shard-size re-shards greedily (convert and quantize);
#   - outputs are atomic: an existing output needs -f, -f replaces a
#     checkpoint directory but refuses a folder of other things, a failed
#     run leaves no output and no temporary directory;
#   - --format compressed-tensors equals the specification's layout built in
#     NumPy (lib/ct_check.py) and decompresses to the --fake-quant values;
#     fused groups of different schemes are refused;
#   - batch lists a checkpoint directory as one model; a recipe of several
#     steps writes a checkpoint equal to the same recipe on the flat file;
#   - hostile indexes (.., absolute, a tensor in two shards, missing shard,
#     unlisted or ghost tensors, a huge index) exit 2 with one line.
source "$(dirname "${BASH_SOURCE[0]}")/lib/cli_test.bash"

"$PY" -c 'import numpy' 2>/dev/null || skip "the Python at $PY has no numpy"
K() { "$PY" "$TESTLIB/ckpt_check.py" "$@"; }
QUICK=${NPUC_TEST_QUICK:-0}

K make "$T/in" "$T/flat.safetensors"
SH3="model-00001-of-00003.safetensors model-00002-of-00003.safetensors model-00003-of-00003.safetensors"

# info sees one model
expect_rc 0 "$NPUC_BIN" info --json "$T/in"
"$PY" - "$T/out" <<'PYEOF'
import json, sys
j = json.load(open(sys.argv[1]))
assert j["format"] == "checkpoint", j["format"]
assert len(j["tensors"]) == 26, len(j["tensors"])
PYEOF

# quantize (the index file names the same model as its directory) and
# decompress: sharded == unsharded, shards kept, index right, sides copied
expect_rc 0 "$NPUC_BIN" quantize "$T/in/model.safetensors.index.json" -o "$T/q" --bits 4 --group-size 32
expect_rc 0 "$NPUC_BIN" quantize "$T/flat.safetensors" -o "$T/q.safetensors" --bits 4 --group-size 32
expect_rc 0 "$NPUC_BIN" validate "$T/q"
expect_rc 0 "$NPUC_BIN" decompress "$T/q" -o "$T/d"
expect_rc 0 "$NPUC_BIN" decompress "$T/q.safetensors" -o "$T/d.safetensors"
# --max-shard-size re-shards greedily; one shard is model.safetensors without an index
expect_rc 0 "$NPUC_BIN" convert "$T/in" -o "$T/c" --max-shard-size 40K
expect_rc 0 "$NPUC_BIN" quantize "$T/in" -o "$T/q2" --bits 4 --group-size 32 --max-shard-size 12K
expect_rc 0 "$NPUC_BIN" convert "$T/flat.safetensors" -o "$T/c1" --max-shard-size 1G
[ ! -e "$T/c1/model.safetensors.index.json" ] || fail "one shard needs no index"
K same "$T/q" "$T/q.safetensors" , shards "$T/q" $SH3 , index "$T/q" , sides "$T/in" "$T/q" , \
  same "$T/d" "$T/d.safetensors" , shards "$T/d" $SH3 , index "$T/d" , sides "$T/in" "$T/d" , \
  same "$T/c" "$T/in" , index "$T/c" 40960 , sides "$T/in" "$T/c" , \
  same "$T/q2" "$T/q.safetensors" , index "$T/q2" 12288 , \
  shards "$T/c1" model.safetensors , same "$T/c1" "$T/flat.safetensors"
# without -o a checkpoint's output is the directory "<ckpt>.<tag>"
expect_rc 0 "$NPUC_BIN" quantize "$T/in/model.safetensors.index.json"
K shards "$T/in.q8" $SH3 , index "$T/in.q8" , sides "$T/in" "$T/in.q8"
expect_rc 2 "$NPUC_BIN" convert "$T/in" -o "$T/cx" --max-shard-size 0
must_match "$T/err" "max-shard-size"

# compressed-tensors (docs/compressed-tensors.md): npuc's output equals the
# layout built in NumPy from the specification (tests/cli/lib/ct_check.py) out of
# npuc's own artifact of the same quantization, and decompress gives the
# --fake-quant values exactly; schemes: int4/g32 sym (q above), int4/channel
# asym, int8/g32 asym
C() { "$PY" "$TESTLIB/ct_check.py" "$@"; }
schemes="4:--group-size=32 4:--asymmetric 8:--asymmetric:--group-size=32"
[ "$QUICK" = 1 ] && schemes="4:--asymmetric 8:--asymmetric:--group-size=32"
for sc in $schemes; do
    bits=${sc%%:*}
    read -r -a extra <<<"$(echo "${sc#*:}" | tr ':=' '  ')"
    tag="b$bits$(echo "${sc#*:}" | tr -d ':=-')"
    [ "$sc" = "4:--group-size=32" ] && art="$T/q" || {
        art="$T/a$tag"
        expect_rc 0 "$NPUC_BIN" quantize "$T/in" -o "$art" --bits "$bits" "${extra[@]}"
    }
    expect_rc 0 "$NPUC_BIN" quantize "$T/in" -o "$T/ct$tag" --bits "$bits" "${extra[@]}" --format compressed-tensors
    expect_rc 0 "$NPUC_BIN" quantize "$T/in" -o "$T/fq$tag" --bits "$bits" "${extra[@]}" --fake-quant
    expect_rc 0 "$NPUC_BIN" decompress "$T/ct$tag" -o "$T/ctd$tag"
    C expect "$T/in" "$art" "$T/ct$tag" , dense "$T/ctd$tag" "$T/fq$tag"
done
# the dense output's config.json no longer claims compressed-tensors
"$PY" -c 'import json,sys; c=json.load(open(sys.argv[1])); assert "quantization_config" not in c and c["model_type"] == "llama"' \
    "$T/ctdb4asymmetric/config.json"
expect_rc 0 "$NPUC_BIN" info "$T/ctb4asymmetric"
K index "$T/ctb4asymmetric"
cmp "$T/in/tokenizer.json" "$T/ctb4asymmetric/tokenizer.json" || fail "tokenizer.json not copied"
# fused groups (q/k/v, gate/up) must share one scheme
expect_rc 2 "$NPUC_BIN" quantize "$T/in" -o "$T/ctf" --bits 4 --layer-bits 'k_proj=8' --format compressed-tensors
must_match "$T/err" "q_proj.weight' is int4/channel sym but '.*k_proj.weight' is int8/channel sym; runtimes load q/k/v as one layer"
[ ! -e "$T/ctf" ] || fail "a refused compressed-tensors output was published"
expect_rc 2 "$NPUC_BIN" quantize "$T/in" -o "$T/ctx" --format bogus
must_match "$T/err" "expected npuc or compressed-tensors"

# atomic outputs and -f
expect_rc 2 "$NPUC_BIN" convert "$T/in" -o "$T/c"
must_match "$T/err" "output exists \(use -f"
expect_rc 0 "$NPUC_BIN" convert "$T/in" -o "$T/c" -f
mkdir "$T/other" && echo keep >"$T/other/notes.txt"
expect_rc 2 "$NPUC_BIN" convert "$T/in" -o "$T/other" -f
must_match "$T/err" "replaces only an empty directory or a checkpoint"
[ "$(cat "$T/other/notes.txt")" = keep ] || fail "-f touched a folder of other things"
# a failing run (a NaN weight) publishes nothing and leaves no temporary directory
cp -r "$T/in" "$T/nan"
"$PY" - "$T/nan/model-00002-of-00003.safetensors" <<'PYEOF'
import json, struct, sys
p = sys.argv[1]
b = bytearray(open(p, "rb").read())
n = struct.unpack("<Q", b[:8])[0]
h = json.loads(b[8:8 + n])
k = next(k for k, v in h.items() if k != "__metadata__" and v["dtype"] == "F32")
o = 8 + n + h[k]["data_offsets"][0]
b[o:o + 4] = struct.pack("<f", float("nan"))
open(p, "wb").write(b)
PYEOF
expect_rc 2 "$NPUC_BIN" quantize "$T/nan" -o "$T/qnan"
[ ! -e "$T/qnan" ] || fail "a failed run published its output"
if ls -a "$T" | grep -q 'npuc-.*tmpdir'; then fail "a temporary directory was left behind"; fi

# batch: a checkpoint directory is one model
mkdir -p "$T/zoo" && cp -r "$T/in" "$T/zoo/llama"
printf 'steps:\n  - quantize: {bits: 4, group_size: 32}\n' >"$T/r.yaml"
expect_rc 0 "$NPUC_BIN" batch "$T/r.yaml" --input "$T/zoo" --output "$T/zout" -j 1
must_match "$T/out" "ok +llama"
if [ "$QUICK" != 1 ]; then
    expect_rc 0 "$NPUC_BIN" batch "$T/r.yaml" --input "$T/zoo" --output "$T/zout" -j 1 --resume
    must_match "$T/out" "skipped +llama"
fi

# a recipe of several steps writes a checkpoint: equal, tensor for tensor,
# to the same recipe on the unsharded file; shards, index and side files as
# for one step; -f replaces it (one step or several); no step file or
# directory is left, and a dead run's step directory is swept
printf 'steps:\n  - prune: {sparsity: 0.5}\n  - quantize: {}\n' >"$T/r2.yaml"
expect_rc 0 "$NPUC_BIN" run "$T/r2.yaml" "$T/in" -o "$T/rr"
expect_rc 0 "$NPUC_BIN" run "$T/r2.yaml" "$T/flat.safetensors" -o "$T/rr.safetensors"
expect_rc 0 "$NPUC_BIN" run "$T/r2.yaml" "$T/in" -o "$T/rr3/" --max-shard-size 12K
K same "$T/rr" "$T/rr.safetensors" , shards "$T/rr" $SH3 , index "$T/rr" , sides "$T/in" "$T/rr" , \
  same "$T/rr3" "$T/rr.safetensors" , index "$T/rr3" 12288 , sides "$T/in" "$T/rr3"
expect_rc 2 "$NPUC_BIN" run "$T/r2.yaml" "$T/in" -o "$T/rr"
must_match "$T/err" "rr: output exists \(use -f"
mkdir "$T/.rr.npucstep-99999-0123456789abcdef.s2.tmp"
cp "$T/in/config.json" "$T/.rr.npucstep-99999-0123456789abcdef.s2.tmp/"
expect_rc 0 "$NPUC_BIN" run "$T/r.yaml" "$T/in" -o "$T/rr" -f
K same "$T/rr" "$T/q.safetensors" , shards "$T/rr" $SH3 , sides "$T/in" "$T/rr"
expect_rc 0 "$NPUC_BIN" run "$T/r2.yaml" "$T/in" -o "$T/rr" -f
K same "$T/rr" "$T/rr.safetensors"
if ls -a "$T" | grep '^\.rr'; then fail "a recipe run left step files behind"; fi
expect_rc 2 "$NPUC_BIN" run "$T/r2.yaml" "$T/in" -o "$T/other" -f
must_match "$T/err" "replaces only an empty directory or a checkpoint"
[ "$(cat "$T/other/notes.txt")" = keep ] || fail "-f touched a folder of other things"

# hostile indexes: one line, exit 2, nothing read outside the directory
K shards "$T/c" $SH3 , index "$T/c" , same "$T/zout/llama" "$T/q" , sides "$T/in" "$T/zout/llama"
kinds="dotdot absolute twoshards inboth missing ghost unlisted notstring huge"
[ "$QUICK" = 1 ] && kinds="dotdot inboth ghost huge"
for kind in $kinds; do
    rm -rf "$T/h" && cp -r "$T/in" "$T/h"
    K hostile "$T/h" "$kind"
    expect_rc 2 "$NPUC_BIN" info "$T/h"
    [ "$(wc -l <"$T/err")" -eq 1 ] || fail "$kind: expected one line: $(cat "$T/err")"
    case $kind in
    dotdot) must_match "$T/err" "contains '\.\.'" ;;
    absolute) must_match "$T/err" "is an absolute path" ;;
    twoshards) must_match "$T/err" "duplicate object key" ;;
    inboth) must_match "$T/err" "is also in this shard, but the index maps it to" ;;
    missing) must_match "$T/err" "is missing from" ;;
    ghost) must_match "$T/err" "'model.ghost.weight' is listed in shard .*which does not hold it" ;;
    unlisted) must_match "$T/err" "is not listed in the index" ;;
    notstring) must_match "$T/err" "shard is not a string" ;;
    huge) must_match "$T/err" "over the 67108864-byte limit" ;;
    esac
done
mkdir "$T/empty"
expect_rc 2 "$NPUC_BIN" info "$T/empty"
must_match "$T/err" "not a checkpoint"
echo "checkpoints: ok"
