#!/usr/bin/env bash
# npuc's 8-bit codes equal torch.quantize_per_channel / quantize_per_tensor
# given npuc's scales and zero points, on every shared model and the samples,
# symmetric and asymmetric, per channel and per tensor (issue: quantize).
source "$(dirname "$0")/lib/cli_test.bash"
"$PY" -c "import torch, numpy" 2>/dev/null || skip "python3-torch is not installed (.ci/install-deps --test installs it)"

inputs=("$SAMPLES/cnn_bn.safetensors" "$SAMPLES/mlp_attn.safetensors")
seen_shared=0
for m in $MODELS; do
    # The quick passes (sanitizers): the samples and one shared model.
    if [ -n "$SHARED" ] && [ -f "$SHARED/$m.safetensors" ] && { ! is_quick || [ "$seen_shared" -eq 0 ]; }; then
        inputs+=("$SHARED/$m.safetensors")
        seen_shared=$((seen_shared + 1))
    fi
done
[ "$seen_shared" -gt 0 ] || echo "note: shared models absent; checking the samples only" >&2

for f in "${inputs[@]}"; do
    arts=()
    k=0
    for scheme in "--symmetric --per-channel" "--asymmetric --per-channel" "--symmetric --per-tensor" "--asymmetric --per-tensor"; do
        out="$T/$(basename "$f" .safetensors).$k.q8.safetensors"
        k=$((k + 1))
        # shellcheck disable=SC2086
        "$NPUC_BIN" quantize --bits 8 $scheme -q -f "$f" -o "$out" >/dev/null
        arts+=("$out")
    done
    "$PY" "$TESTLIB/torch_codes.py" "$f" "${arts[@]}" || fail "$f: codes differ from torch"
done
echo "torch_codes: ${#inputs[@]} models x 4 schemes checked"
