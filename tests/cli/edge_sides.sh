# edge_sides.sh - issue 31 item 4: the 8-bit edge rule decides each side
# (input, output) on its own, from the file's graph, else names, else order
# (a guess, flagged, refused by --strict):
#   - a character LM whose token embedding is `tok` (and the other short
#     forms tok_emb, emb, embedding, token_embedding, wte, shared) keeps the
#     embedding at 8 bits in a 4-bit run, like its head;
#   - a Paddle detector whose convs are all conv2d_N: the first conv is not
#     "kept (name conv2d)" (the name says nothing), and the output head
#     conv2d_transpose_1 stays at 8 bits whether stored in graph order or
#     alphabetically, as a flagged guess that --strict refuses;
#   - a Keras .h5 with a model_config whose names tell nothing and whose
#     layer_names put the output Dense first: both edges come from the
#     config's topology (no guess, --strict accepts);
#   - sharded checkpoints: one shard quantized alone decides over the whole
#     model through the index (no per-shard first/last layer); without an
#     index only names decide;
#   - ../shared/data: nsfwjs_mobilenet_v2.h5 keeps Conv1 and dense_3 by its
#     config, ppocr_mobile_v2_cls does not call conv2d_0 "name conv2d".
# Which tensors are 8-bit is read from the artifact's own header
# (tests/cli/lib/edge_sides.py: 8-bit codes are I8 of the original shape,
# 4-bit ones packed U8), against what the description says.
source "$(dirname "${BASH_SOURCE[0]}")/lib/cli_test.bash"
"$PY" -c 'import numpy, h5py' 2>/dev/null || skip "no numpy/h5py"
"$PY" "$TESTLIB/edge_sides.py" make "$T"
eight() { "$PY" "$TESTLIB/edge_sides.py" eight "$1"; }
want() { # WHAT FILE EXPECTED (names in any order)
    local got exp
    got=$(eight "$2")
    exp=$(printf '%s\n' $3 | LC_ALL=C sort | paste -sd' ')
    [ "$got" = "$exp" ] || fail "$1: 8-bit tensors are '$got', want '$exp'"
}

# --- token embeddings by their short names
for e in tok tok_emb emb embedding token_embedding wte shared; do
    expect_rc 0 "$NPUC_BIN" quantize --bits 4 "$T/lm_$e.safetensors" -o "$T/lm.q.safetensors" -f
    want "lm $e" "$T/lm.q.safetensors" "$e.weight head.weight"
    [ "$e" = embedding ] || [ "$e" = token_embedding ] ||
        must_match "$T/out" "$e\.weight .*kept at 8 bits: embedding \(name $e\)"
    must_not_match "$T/err" 'guess'
done
must_match "$T/out" 'head\.weight .*kept at 8 bits: output head \(name head\)'
expect_rc 0 "$NPUC_BIN" quantize --strict --bits 4 "$T/lm_tok.safetensors" -o "$T/lm.s.safetensors"
# a head tied to the embedding (none stored, no layer makes V=100 outputs): nothing more kept
expect_rc 0 "$NPUC_BIN" quantize --strict --bits 4 "$T/gpt_tied.safetensors" -o "$T/gpt.q.safetensors"
want "gpt tied" "$T/gpt.q.safetensors" "wte.weight"
# names match on whole components: no head, no input conv among these, so order decides (a guess)
expect_rc 0 "$NPUC_BIN" quantize --bits 4 "$T/components.safetensors" -o "$T/c.q.safetensors"
want components "$T/c.q.safetensors" "stem_in.weight classifier_x.weight"
must_match "$T/out" 'stem_in\.weight .*first weight layer \(storage order, a guess\)'
must_match "$T/out" 'classifier_x\.weight .*last weight layer \(storage order, a guess\)'
echo "short embedding names ok"

# --- the Paddle detector: conv2d_N says nothing; the head by order, a guess
for s in det_graph_order det_sorted; do
    expect_rc 0 "$NPUC_BIN" quantize --bits 4 "$T/$s.safetensors" -o "$T/det.q.safetensors" -f
    want "$s" "$T/det.q.safetensors" "conv2d_0.w_0 conv2d_transpose_1.w_0"
    must_not_match "$T/out" 'name conv2d'
    must_match "$T/out" 'conv2d_0\.w_0 .*kept at 8 bits: first weight layer \((storage|numbering) order, a guess\)'
    must_match "$T/out" 'conv2d_transpose_1\.w_0 .*kept at 8 bits: last weight layer \((storage|numbering) order, a guess\)'
    must_match "$T/err" 'warning: 2 layer\(s\) kept at 8 bits .* alone, a guess'
    expect_rc 2 "$NPUC_BIN" quantize --strict --bits 4 "$T/$s.safetensors" -o "$T/det.s.safetensors"
    must_match "$T/err" "tensor 'conv2d_0\.w_0': kept at 8 bits as an edge layer by .* alone"
    [ ! -e "$T/det.s.safetensors" ] || fail "$s: --strict wrote an output"
done
# the edges are the model's, not the selection's: --include of a middle conv takes it to 4 bits
expect_rc 0 "$NPUC_BIN" quantize --bits 4 --include '^conv2d_3\.' "$T/det_graph_order.safetensors" -o "$T/det.i.safetensors"
want "det --include conv2d_3" "$T/det.i.safetensors" ""
must_match "$T/out" 'conv2d_3\.w_0 .* int4/'
echo "paddle detector ok"

# --- Keras .h5 with model_config: the topology decides, whatever the storage order
expect_rc 0 "$NPUC_BIN" quantize --bits 4 "$T/keras_cfg.h5" -o "$T/k.q.safetensors"
want keras "$T/k.q.safetensors" "ca/kernel:0 dense_1/kernel:0"
must_match "$T/out" "ca/kernel:0 .*kept at 8 bits: input convolution \(config: reads the model input, layer 'ca'\)"
must_match "$T/out" "dense_1/kernel:0 .*kept at 8 bits: output head \(config: makes the model output, layer 'dense_1'\)"
must_not_match "$T/err" 'guess|storage order'
expect_rc 0 "$NPUC_BIN" quantize --strict --bits 4 "$T/keras_cfg.h5" -o "$T/k.s.safetensors"
echo "keras config ok"

# --- sharded checkpoints: decided over the whole model
ck=model-0000
expect_rc 0 "$NPUC_BIN" quantize --bits 4 "$T/ck_plain/${ck}1-of-00002.safetensors" -o "$T/p1.safetensors"
want "plain shard 1" "$T/p1.safetensors" "in_proj.weight"
must_match "$T/out" 'in_proj\.weight .*first weight layer \(storage order, over all shards, a guess\)'
expect_rc 0 "$NPUC_BIN" quantize --bits 4 "$T/ck_plain/${ck}2-of-00002.safetensors" -o "$T/p2.safetensors"
want "plain shard 2" "$T/p2.safetensors" "final.weight"
expect_rc 0 "$NPUC_BIN" quantize --bits 4 "$T/ck_plain" -o "$T/pw"
got=$(for f in "$T"/pw/*.safetensors; do eight "$f"; done | tr '\n' ' ')
[ "$got" = "in_proj.weight final.weight " ] || fail "plain checkpoint: 8-bit tensors are '$got'"
for d in ck_lm ck_lm_noindex; do
    expect_rc 0 "$NPUC_BIN" quantize --bits 4 "$T/$d/${ck}1-of-00002.safetensors" -o "$T/l1.safetensors" -f
    want "$d shard 1" "$T/l1.safetensors" "tok.weight"
    expect_rc 0 "$NPUC_BIN" quantize --bits 4 "$T/$d/${ck}2-of-00002.safetensors" -o "$T/l2.safetensors" -f
    want "$d shard 2" "$T/l2.safetensors" "head.weight"
done
# without an index a shard's names alone decide: no first/last of the shard
expect_rc 0 "$NPUC_BIN" quantize --bits 4 "$T/ck_plain_noindex/${ck}1-of-00002.safetensors" -o "$T/n1.safetensors"
want "plain shard 1 without index" "$T/n1.safetensors" ""
must_match "$T/err" 'no layer kept at 8 bits'
echo "shards ok"

# --- real models
if [ -n "$SHARED" ] && [ -f "$SHARED/nsfwjs_mobilenet_v2.h5" ]; then
    expect_rc 0 "$NPUC_BIN" quantize --bits 4 "$SHARED/nsfwjs_mobilenet_v2.h5" -o "$T/ns.safetensors"
    want nsfwjs "$T/ns.safetensors" "Conv1/kernel dense_3/kernel"
    must_match "$T/out" "dense_3/kernel .*kept at 8 bits: output head \(config: makes the model output"
    must_not_match "$T/err" 'edge layer|first/last'
fi
if [ -n "$SHARED" ] && [ -f "$SHARED/ppocr_mobile_v2_cls.safetensors" ]; then
    expect_rc 0 "$NPUC_BIN" quantize --bits 4 "$SHARED/ppocr_mobile_v2_cls.safetensors" -o "$T/pp.safetensors"
    want ppocr_cls "$T/pp.safetensors" "conv2d_0.w_0 fc_0.w_0"
    must_not_match "$T/out" 'name conv2d'
    must_match "$T/out" 'conv2d_0\.w_0 .*first weight layer \(numbering order, a guess\)'
fi
echo "edge sides ok"
