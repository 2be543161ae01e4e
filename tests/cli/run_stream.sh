#!/usr/bin/env bash
# npuc run: a quantize step streams its input from the step before it.
#  - the streamed artifact is byte-identical to the one made through
#    intermediate files (--no-stream), which tests/cli/run.sh checks against
#    the commands run one by one, for every sample recipe, for -j 1 and 2,
#    for a three-step chain, and for an HDF5 output (which does not stream);
#  - the intermediate never reaches the disk: with a directory squatting on
#    the name the first step's file would be written through, the
#    --no-stream run fails and the streamed run succeeds;
#  - a failure on either side of the stream (the quantize step stopping on
#    a NaN mid-way, the first step failing, a pattern of the second step
#    matching nothing) gives the same one-line error as --no-stream, exit 2,
#    no output and no temporary file.
source "$(dirname "$0")/lib/cli_test.bash"

R="$NPUC_SRC/samples/recipes"
cnn="$SAMPLES/cnn_bn.safetensors"
keras="$SAMPLES/cnn_bn_keras.h5"
mlp="$SAMPLES/mlp_attn.safetensors"

both() { # both NAME RECIPE IN EXT [extra args]: streamed and --no-stream agree
    local name=$1 recipe=$2 in=$3 ext=$4
    shift 4
    expect_rc 0 "$NPUC_BIN" run "$recipe" "$in" -o "$T/$name.s.$ext" -q "$@"
    expect_rc 0 "$NPUC_BIN" run "$recipe" "$in" -o "$T/$name.f.$ext" -q --no-stream "$@"
    cmp -s "$T/$name.s.$ext" "$T/$name.f.$ext" || fail "$name: streamed and --no-stream artifacts differ"
    ls "$T" | grep -q '\.tmp' && fail "$name: temporary files left: $(ls "$T" | grep '\.tmp')"
    return 0
}

both fold "$R/fold_int8.yaml" "$cnn" safetensors
both sparse "$R/sparse24_int8.yaml" "$mlp" safetensors
both lowrank "$R/lowrank_int8.yaml" "$mlp" safetensors
both int4 "$R/int4_g128_first_last_int8.yaml" "$mlp" safetensors
both fold_j1 "$R/fold_int8.yaml" "$cnn" safetensors -j 1
both fold_j2 "$R/fold_int8.yaml" "$cnn" safetensors -j 2
cmp -s "$T/fold_j1.s.safetensors" "$T/fold_j2.s.safetensors" || fail "streamed artifact differs for -j 1 and -j 2"
cmp -s "$T/fold_j1.s.safetensors" "$T/fold.s.safetensors" || fail "streamed artifact differs between runs"

cat >"$T/three.yaml" <<'EOF'
version: 1
steps:
  - fold-bn: {}
  - prune:
      sparsity: 0.5
  - quantize:
      bits: 4
      group_size: 8
      quantize_all: true
EOF
both three "$T/three.yaml" "$cnn" safetensors
# lowrank that really factors: quantize streams the factors (nested artifact).
printf 'version: 1\nsteps:\n  - lowrank:\n      rank: 4\n  - quantize:\n      bits: 8\n' >"$T/lq.yaml"
both lowrank_q "$T/lq.yaml" "$mlp" safetensors
"$NPUC_BIN" run "$T/lq.yaml" "$mlp" -o "$T/lq_table.safetensors" >"$T/table.txt"
# The run's table puts each factor under the tensor it came from.
grep -A2 '^mlp\.fc1\.weight ' "$T/table.txt" | sed -n 2,3p | grep -c '^mlp\.fc1\.weight\.lr_[ab] ' | grep -qx 2 ||
    fail "factor rows not under their tensor: $(cat "$T/table.txt")"
if have_h5py; then
    both keras "$R/fold_int8.yaml" "$keras" h5
fi

# The intermediate does not touch the disk.  Step files have names private
# to their run (src/pipeline/recipe_files.c), so no trap can be set at a
# fixed name: strace shows which files each run creates.
out="$T/trap.safetensors"
if NPUC_VALGRIND=0 ASAN_OPTIONS="${ASAN_OPTIONS:-}:detect_leaks=0" strace -f -qq -o /dev/null true 2>/dev/null; then
    NPUC_VALGRIND=0 ASAN_OPTIONS="${ASAN_OPTIONS:-}:detect_leaks=0" strace -f -qq -e trace=openat,rename,renameat,renameat2,link -o "$T/ns.trace" \
        "$NPUC_BIN" run "$R/fold_int8.yaml" "$cnn" -o "$out" -q --no-stream || fail "--no-stream run failed"
    grep -Eq 'npucstep-[0-9]+-[0-9a-f]{16}\.s1\.tmp' "$T/ns.trace" || fail "--no-stream wrote no step file: $(cat "$T/ns.trace")"
    rm -f "$out"
    NPUC_VALGRIND=0 ASAN_OPTIONS="${ASAN_OPTIONS:-}:detect_leaks=0" strace -f -qq -e trace=openat,rename,renameat,renameat2,link -o "$T/s.trace" \
        "$NPUC_BIN" run "$R/fold_int8.yaml" "$cnn" -o "$out" -q || fail "streamed run failed"
    ! grep -Eq 'npucstep-[0-9]+-[0-9a-f]{16}\.s1\.tmp' "$T/s.trace" || fail "the streamed run wrote its intermediate: $(grep -E 'npucstep-[0-9]+-[0-9a-f]{16}\.s1\.tmp' "$T/s.trace")"
    cmp -s "$out" "$T/fold.s.safetensors" || fail "traced run differs from the plain streamed run"
    ls -a "$T" | grep -q 'npuc-' && fail "temporary files left: $(ls -a "$T")"
fi

# Failures on either side of the stream.
"$PY" - "$T/nan.safetensors" <<'PY'
import json, struct, sys
import numpy as np
rng = np.random.default_rng(0)
ts = {f"l{i}.weight": rng.standard_normal((64, 64)).astype(np.float32) for i in range(6)}
ts["l3.weight"][5, 7] = np.nan
hdr, off, blobs = {}, 0, []
for k, v in ts.items():
    b = v.tobytes()
    hdr[k] = {"dtype": "F32", "shape": list(v.shape), "data_offsets": [off, off + len(b)]}
    off += len(b)
    blobs.append(b)
h = json.dumps(hdr).encode()
h += b" " * (-len(h) % 8)
open(sys.argv[1], "wb").write(struct.pack("<Q", len(h)) + h + b"".join(blobs))
PY
cat >"$T/e_quant.yaml" <<'EOF'
version: 1
steps:
  - prune:
      sparsity: 0.5
      include: ['^l0\.weight$']
  - quantize:
      bits: 8
EOF
cat >"$T/e_first.yaml" <<'EOF'
version: 1
steps:
  - prune:
      sparsity: 0.5
  - quantize:
      bits: 8
EOF
cat >"$T/e_pattern.yaml" <<'EOF'
version: 1
steps:
  - prune:
      sparsity: 0.5
      include: ['^l0\.weight$']
  - quantize:
      bits: 8
      exclude: ['^nothing$']
EOF
for e in e_quant:"step 2 \(quantize.*'l3\.weight': 1 NaN" e_first:"step 1 \(prune.*'l3\.weight'" \
         e_pattern:"step 2 \(quantize.*e_pattern\.yaml:8:[0-9]+: .*'\^nothing\\$' matches no tensor"; do
    name=${e%%:*}
    want=${e#*:}
    expect_rc 2 "$NPUC_BIN" run "$T/$name.yaml" "$T/nan.safetensors" -o "$T/$name.s.safetensors"
    [ "$(wc -l <"$T/err")" -eq 1 ] || fail "$name: not one line: $(cat "$T/err")"
    must_match "$T/err" "$want"
    sed "s/$name\.s\./X./g" "$T/err" >"$T/err.s"
    expect_rc 2 "$NPUC_BIN" run "$T/$name.yaml" "$T/nan.safetensors" -o "$T/$name.f.safetensors" --no-stream
    sed "s/$name\.f\./X./g" "$T/err" >"$T/err.f"
    cmp -s "$T/err.s" "$T/err.f" || fail "$name: streamed error '$(cat "$T/err.s")' != '$(cat "$T/err.f")'"
    [ ! -e "$T/$name.s.safetensors" ] && [ ! -e "$T/$name.f.safetensors" ] || fail "$name: output written"
    ls "$T" | grep -q '\.tmp' && fail "$name: temporary files left: $(ls "$T" | grep '\.tmp')"
done
echo "ok"
