#!/usr/bin/env bash
# artifact_hashes.sh - SHA-256 of every pass command's output on the bundled
# samples and the shared models in both formats, for showing that a refactor
# changes no byte of any artifact.
#
#   bench/artifact_hashes.sh NPUC_BIN > before.txt     (at the old commit)
#   bench/artifact_hashes.sh NPUC_BIN > after.txt      (at the new commit)
#   diff before.txt after.txt
#
# Each line: "<sha256>  <model>/<job>"; stdout of the per-tensor lines is
# hashed too (as "<job>.stdout"), since those are what users read.  A job
# that fails prints "FAILED rc=N" instead of a hash, so a change of exit code
# shows as a difference too.  Commands run at -j 2 and -j 1 alternately to
# also cover the thread-count invariance.
set -uo pipefail
bin=${1:?usage: artifact_hashes.sh NPUC_BIN [SHARED_DATA_DIR]}
bin=$(readlink -f "$bin")
src=$(cd "$(dirname "$0")/.." && pwd)
data=$(readlink -f "${2:-$src/../shared/data}")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

models=("$src/samples/cnn_bn.safetensors" "$src/samples/mlp_attn.safetensors" "$src/samples/cnn_bn_keras.h5")
for stem in silero_vad_v5 ppocrv4_rec ppocr_mobile_v2_cls nsfwjs_mobilenet_v2 \
            faceapi_tiny_face_detector faceapi_face_expression; do
  for ext in safetensors h5; do
    [[ -f "$data/$stem.$ext" ]] && models+=("$data/$stem.$ext")
  done
done

# job name | output extension | arguments (IN and OUT substituted)
jobs=(
  "q8ch|same|quantize --bits 8 --per-channel IN -o OUT -j 2"
  "q4g32|same|quantize --bits 4 --group-size 32 IN -o OUT -j 1"
  "q4asym_mse|same|quantize --bits 4 --asymmetric --range mse IN -o OUT -j 2"
  "q8pt_pct|same|quantize --bits 8 --per-tensor --range percentile=99.9 IN -o OUT -j 1"
  "q3all|same|quantize --bits 3 --quantize-all IN -o OUT -j 2"
  "fq6|same|quantize --bits 6 --fake-quant IN -o OUT -j 2"
  "q8p24|same|quantize --bits 8 --pattern 2:4 IN -o OUT -j 2"
  "q8h5|h5|quantize --bits 8 IN -o OUT -j 2 --deflate 1"
  "prune50|same|prune --sparsity 0.5 IN -o OUT -j 2"
  "prune30g|same|prune --sparsity 0.3 --scope global IN -o OUT -j 1"
  "prune25f|same|prune --sparsity 0.25 --structured filter IN -o OUT -j 2"
  "prune25c|same|prune --sparsity 0.25 --structured channel --criterion l2 IN -o OUT -j 1"
  "sp24|same|sparsify --pattern 2:4 IN -o OUT -j 2"
  "sp24c|same|sparsify --pattern 2:4 --compressed IN -o OUT -j 1"
  "lr_e99|same|lowrank --energy 0.99 IN -o OUT -j 2"
  "lr_r4|same|lowrank --rank 4 --solver exact IN -o OUT -j 1"
  "lr_ratio|same|lowrank --rank-ratio 0.5 --solver randomized --seed 3 IN -o OUT -j 2"
  "foldbn|same|fold-bn IN -o OUT -j 2"
  "foldbn_ng|same|fold-bn --no-guess IN -o OUT -j 1"
  "conv_f16|h5|convert IN -o OUT --dtype f16"
  "conv_st|safetensors|convert IN -o OUT"
  "run_fold8|same|run $src/samples/recipes/fold_int8.yaml IN -o OUT -j 2"
  "run_lr8|same|run $src/samples/recipes/lowrank_int8.yaml IN -o OUT -j 1"
  "run_sp24|same|run $src/samples/recipes/sparse24_int8.yaml IN -o OUT -j 2"
  "run_g128|same|run $src/samples/recipes/int4_g128_first_last_int8.yaml IN -o OUT -j 2"
)

for model in "${models[@]}"; do
  base=$(basename "$model")
  mext=${base##*.}
  for j in "${jobs[@]}"; do
    IFS='|' read -r name oext args <<<"$j"
    [[ $oext == same ]] && oext=$mext
    out="$work/$base.$name.$oext"
    rm -f "$out"
    args=${args//IN/$model}
    args=${args//OUT/$out}
    # shellcheck disable=SC2086
    "$bin" $args >"$work/stdout" 2>"$work/stderr"
    rc=$?
    if [[ $rc -ne 0 ]]; then
      # The message, with the checkout's and the data's paths taken out, so
      # two checkouts in different folders compare equal.
      msg=$(sed -e "s|$src|SRC|g" -e "s|$data|DATA|g" -e "s|$work|WORK|g" "$work/stderr" | head -c 240 | tr '\n' ' ')
      echo "FAILED rc=$rc  $base/$name ($msg)"
      continue
    fi
    echo "$(sha256sum <"$out" | cut -d' ' -f1)  $base/$name"
    # stdout with the checkout's, the data's and the work folder's paths
    # taken out (a recipe run names its recipe file), as for messages.
    echo "$(sed -e "s|$src|SRC|g" -e "s|$data|DATA|g" -e "s|$work|WORK|g" "$work/stdout" | sha256sum | cut -d' ' -f1)  $base/$name.stdout"
    # The artifact decompressed: its decoders are part of what must not change.
    if [[ $name == q* || $name == sp24c || $name == lr_* || $name == fq6 || $name == run_* ]]; then
      dq="$work/$base.$name.dq.safetensors"
      rm -f "$dq"
      if "$bin" decompress "$out" -o "$dq" >/dev/null 2>"$work/stderr"; then
        echo "$(sha256sum <"$dq" | cut -d' ' -f1)  $base/$name.decompressed"
      else
        echo "FAILED rc=$?  $base/$name.decompressed"
      fi
      rm -f "$dq"
    fi
    rm -f "$out"
  done
done
