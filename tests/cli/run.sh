#!/usr/bin/env bash
# npuc run (recipes) end to end:
#  - a recipe equals running its steps one by one with the commands: the same
#    tensors (names, dtypes, shapes, bytes) and the same metadata except the
#    three provenance entries the run adds (npuc.recipe, npuc.recipe_sha256,
#    npuc.input_sha256), which shift the header, so the files are
#    tensor-identical, not byte-identical;
#  - rank / sparsity overrides equal --layer-rank / --layer-sparsity;
#  - artifacts are byte-identical across runs and -j values;
#  - provenance: the recipe hash is the SHA-256 of npuc.recipe, the input hash
#    the SHA-256 of the input file;
#  - reports: the text table has a column per step, the JSON has per-step totals;
#  - errors: recipe errors and patterns that match nothing exit 2 citing
#    line:column, nothing is written and no temporary file is left.
source "$(dirname "$0")/lib/cli_test.bash"

R="$NPUC_SRC/samples/recipes"
cnn="$SAMPLES/cnn_bn.safetensors"
keras="$SAMPLES/cnn_bn_keras.h5"
mlp="$SAMPLES/mlp_attn.safetensors"

# same_but_provenance A B: same tensors, same metadata apart from the run's own.
same_but_provenance() {
    npuc_py compare "$1" "$2" || fail "$1 and $2 hold different tensors"
    npuc_py meta "$1" >"$T/m1.json"
    npuc_py meta "$2" >"$T/m2.json"
    "$PY" - "$T/m1.json" "$T/m2.json" <<'PY' || fail "$1 and $2: metadata differs beyond provenance"
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
for k in ("npuc.recipe", "npuc.recipe_sha256", "npuc.input_sha256"):
    a.pop(k, None); b.pop(k, None)
assert a == b, (a, b)
PY
}

have_step() { # prints nothing; true when this build runs the step
    printf 'steps:\n  - %s: {%s}\n  - quantize:\n' "$1" "$2" >"$T/probe.yaml"
    "$NPUC_BIN" run "$T/probe.yaml" "$cnn" -o "$T/probe.safetensors" -f >"$T/probe.out" 2>&1 || true
    ! grep -q "not available in this build" "$T/probe.out"
}

# --- a recipe equals its steps one by one
for src in "$cnn" "$keras" "$mlp"; do
    keep_case 2 || continue # quick: the first and the last source
    ext="${src##*.}"
    expect_rc 0 "$NPUC_BIN" run "$R/int8_per_channel.yaml" "$src" -o "$T/run.$ext" -f
    expect_rc 0 "$NPUC_BIN" quantize -q --bits 8 --per-channel --symmetric --range minmax "$src" -o "$T/cmd.$ext" -f
    same_but_provenance "$T/run.$ext" "$T/cmd.$ext"
done
expect_rc 0 "$NPUC_BIN" run -q "$R/int4_g128_first_last_int8.yaml" "$mlp" -o "$T/run4.safetensors" -f
expect_rc 0 "$NPUC_BIN" quantize -q --bits 4 --group-size 128 --asymmetric --range mse \
    --layer-bits '^(features\.0|embed)\.weight$=8' --layer-bits '^(classifier|mlp\.fc2)\.weight$=8' \
    "$mlp" -o "$T/cmd4.safetensors" -f
same_but_provenance "$T/run4.safetensors" "$T/cmd4.safetensors"
echo "quantize recipes == npuc quantize"

if have_step fold-bn ""; then
    for src in "$cnn" "$keras"; do
        ext="${src##*.}"
        expect_rc 0 "$NPUC_BIN" run "$R/fold_int8.yaml" "$src" -o "$T/f.$ext" -f
        expect_rc 0 "$NPUC_BIN" fold-bn -q "$src" -o "$T/f1.$ext" -f
        expect_rc 0 "$NPUC_BIN" quantize -q --bits 8 "$T/f1.$ext" -o "$T/f2.$ext" -f
        same_but_provenance "$T/f.$ext" "$T/f2.$ext"
    done
    echo "fold + int8 == fold-bn then quantize"
else
    echo "SKIP: fold-bn is not available in this build"
fi
if have_step sparsify 'pattern: "2:4"'; then
    expect_rc 0 "$NPUC_BIN" run "$R/sparse24_int8.yaml" "$mlp" -o "$T/s.safetensors" -f
    expect_rc 0 "$NPUC_BIN" sparsify -q --pattern 2:4 --exclude '^embed\.weight$' --exclude '^mlp\.fc2\.weight$' "$mlp" -o "$T/s1.safetensors" -f
    expect_rc 0 "$NPUC_BIN" quantize -q --bits 8 "$T/s1.safetensors" -o "$T/s2.safetensors" -f
    same_but_provenance "$T/s.safetensors" "$T/s2.safetensors"
    echo "2:4 + int8 == sparsify then quantize"
else
    echo "SKIP: sparsify is not available in this build"
fi
if have_step prune "sparsity: 0.5"; then
    printf 'steps:\n  - prune:\n      sparsity: 0.5\n      overrides: [{match: "^classifier", skip: true}]\n  - quantize: {bits: 8}\n' \
        >"$T/prune.yaml"
    expect_rc 0 "$NPUC_BIN" run "$T/prune.yaml" "$cnn" -o "$T/pr.safetensors" -f
    expect_rc 0 "$NPUC_BIN" prune -q --sparsity 0.5 --exclude '^classifier' "$cnn" -o "$T/pr1.safetensors" -f
    expect_rc 0 "$NPUC_BIN" quantize -q --bits 8 "$T/pr1.safetensors" -o "$T/pr2.safetensors" -f
    same_but_provenance "$T/pr.safetensors" "$T/pr2.safetensors"
    echo "prune 50% + int8 == prune then quantize"
else
    echo "SKIP: prune is not available in this build"
fi
if have_step lowrank "energy: 0.95"; then
    expect_rc 0 "$NPUC_BIN" run "$R/lowrank_int8.yaml" "$mlp" -o "$T/l.safetensors" -f
    expect_rc 0 "$NPUC_BIN" lowrank -q --energy 0.95 --round-to 8 --solver auto --exclude embed "$mlp" \
        -o "$T/l1.safetensors" -f
    expect_rc 0 "$NPUC_BIN" quantize -q --bits 8 "$T/l1.safetensors" -o "$T/l2.safetensors" -f
    same_but_provenance "$T/l.safetensors" "$T/l2.safetensors"
    echo "low-rank + int8 == lowrank then quantize"
else
    echo "SKIP: lowrank is not available in this build"
fi

# --- per-layer overrides: rank (lowrank) and sparsity (prune) equal --layer-rank and
# --layer-sparsity, overrides first (the first matching rule wins)
if have_step prune "sparsity: 0.5"; then
    for scope in layer global; do
        cat >"$T/ovp.yaml" <<EOF
steps:
  - prune:
      sparsity: 0.6
      scope: $scope
      overrides:
        - match: '^features\.3\.weight\$'
          sparsity: 0.3
        - {match: classifier, sparsity: 0.85}
        - {match: '^features\.0\.', skip: true}
EOF
        expect_rc 0 "$NPUC_BIN" run -q "$T/ovp.yaml" "$cnn" -o "$T/ovp.safetensors" -f
        expect_rc 0 "$NPUC_BIN" prune -q --sparsity 0.6 --scope $scope --layer-sparsity '^features\.3\.weight$=0.3' \
            --layer-sparsity 'classifier=0.85' --exclude '^features\.0\.' "$cnn" -o "$T/ovp1.safetensors" -f
        same_but_provenance "$T/ovp.safetensors" "$T/ovp1.safetensors"
    done
    cat >"$T/ovs.yaml" <<'EOF'
steps:
  - prune:
      sparsity: 0.5
      structured: filter
      overrides: [{match: '^features\.3\.weight$', sparsity: 0.75}]
EOF
    expect_rc 0 "$NPUC_BIN" run -q "$T/ovs.yaml" "$cnn" -o "$T/ovs.safetensors" -f
    expect_rc 0 "$NPUC_BIN" prune -q --sparsity 0.5 --structured filter --layer-sparsity '^features\.3\.weight$=0.75' \
        "$cnn" -o "$T/ovs1.safetensors" -f
    same_but_provenance "$T/ovs.safetensors" "$T/ovs1.safetensors"
    echo "prune overrides == npuc prune --layer-sparsity"
else
    echo "SKIP: prune is not available in this build"
fi
if have_step lowrank "rank: 2"; then
    cat >"$T/ovl.yaml" <<'EOF'
steps:
  - lowrank:
      energy: 0.6
      overrides:
        - {match: 'q_proj\.weight$', rank: 7}
        - match: '^mlp\.'
          rank: 9
        - {match: '^embed', skip: true}
EOF
    expect_rc 0 "$NPUC_BIN" run -q "$T/ovl.yaml" "$mlp" -o "$T/ovl.safetensors" -f
    expect_rc 0 "$NPUC_BIN" lowrank -q --energy 0.6 --layer-rank 'q_proj\.weight$=7' --layer-rank '^mlp\.=9' \
        --exclude '^embed' "$mlp" -o "$T/ovl1.safetensors" -f
    same_but_provenance "$T/ovl.safetensors" "$T/ovl1.safetensors"
    npuc_py meta "$T/ovl.safetensors" >"$T/ovl.json"
    "$PY" - "$T/ovl.json" <<'PY' || fail "lowrank overrides: ranks in the artifact"
import json, sys
d = json.loads(json.load(open(sys.argv[1]))["npuc"])["tensors"]
assert d["attn.q_proj.weight"]["rank"] == 7 and d["mlp.fc1.weight"]["rank"] == 9 and d["mlp.fc2.weight"]["rank"] == 9, d
assert "embed.weight" not in d
PY
    cat >"$T/ovl2.yaml" <<'EOF'
steps:
  - lowrank:
      rank: 2
      round_to: 2
      overrides: [{match: '^features\.3\.weight$', rank: 5}]
EOF
    expect_rc 0 "$NPUC_BIN" run -q "$T/ovl2.yaml" "$cnn" -o "$T/ovl2.safetensors" -f
    expect_rc 0 "$NPUC_BIN" lowrank -q --rank 2 --round-to 2 --layer-rank '^features\.3\.weight$=5' "$cnn" \
        -o "$T/ovl3.safetensors" -f
    same_but_provenance "$T/ovl2.safetensors" "$T/ovl3.safetensors"
    echo "lowrank overrides == npuc lowrank --layer-rank"
else
    echo "SKIP: lowrank is not available in this build"
fi

# --- determinism: reruns and -j
for src in "$cnn" "$keras"; do
    ext="${src##*.}"
    recipe="$R/int8_per_channel.yaml"
    have_step fold-bn "" && recipe="$R/fold_int8.yaml"
    "$NPUC_BIN" run -q -j 1 "$recipe" "$src" -o "$T/d1.$ext" -f >/dev/null
    "$NPUC_BIN" run -q -j 2 "$recipe" "$src" -o "$T/d2.$ext" -f >/dev/null
    "$NPUC_BIN" run -q "$recipe" "$src" -o "$T/d3.$ext" -f >/dev/null
    cmp "$T/d1.$ext" "$T/d2.$ext" || fail "$src: -j 1 and -j 2 differ"
    cmp "$T/d1.$ext" "$T/d3.$ext" || fail "$src: two runs differ"
done
echo "determinism ok"

# --- provenance
"$NPUC_BIN" run -q "$R/int8_per_channel.yaml" "$cnn" -o "$T/p.safetensors" -f >/dev/null
npuc_py meta "$T/p.safetensors" >"$T/meta.json"
"$PY" - "$T/meta.json" "$cnn" <<'PY' || fail "provenance entries"
import hashlib, json, sys
m = json.load(open(sys.argv[1]))
assert hashlib.sha256(m["npuc.recipe"].encode()).hexdigest() == m["npuc.recipe_sha256"]
assert hashlib.sha256(open(sys.argv[2], "rb").read()).hexdigest() == m["npuc.input_sha256"]
assert json.loads(m["npuc.recipe"])["steps"][0]["quantize"]["bits"] == 8
assert not any("time" in k for k in m), m.keys()
PY
echo "provenance ok"

# --- reports: a column per step in text, per-step totals in JSON
recipe="$R/int8_per_channel.yaml"
have_step fold-bn "" && recipe="$R/fold_int8.yaml"
expect_rc 0 "$NPUC_BIN" run "$recipe" "$cnn" -o "$T/r.safetensors" -f --report "$T/r.txt"
must_match "$T/out" '^name +shape +1:'
must_match "$T/r.txt" '^total: '
if [ "$recipe" = "$R/fold_int8.yaml" ]; then
    # cnn_bn: 21 tensors; folding 4 BatchNorms drops 15 and adds 2 biases: 8 in the artifact.
    must_match "$T/out" '^total: 21 tensors in, 8 out, 4 quantized, 4 folded, 15 removed, 2 created; '
fi
must_match "$T/r.txt" '^step 1 '
expect_rc 0 "$NPUC_BIN" run -q "$recipe" "$cnn" -o "$T/r.safetensors" -f --report "$T/r.json"
expect_rc 0 "$NPUC_BIN" run -q --json "$recipe" "$cnn" -o "$T/r.safetensors" -f
"$PY" - "$T/r.json" "$T/out" <<'PY' || fail "JSON report"
import json, sys
for p in sys.argv[1:3]:
    d = json.load(open(p))
    assert d["schema"] == "npuc.report/1" and d["pass"] == "run", d["pass"]
    steps = d["params"]["steps"]
    assert [s["step"] for s in steps] == list(range(1, len(steps) + 1))
    assert all(t["extra"]["step"] in range(1, len(steps) + 1) for t in d["tensors"])
    assert d["totals"]["bytes_after"] == steps[-1]["bytes_after"]
    assert d["totals"]["bytes_before"] == steps[0]["bytes_before"]
    assert len(d["params"]["recipe_sha256"]) == 64
PY
echo "reports ok"

# --- errors
printf 'steps:\n  - quantize:\n      bitz: 4\n' >"$T/bad.yaml"
expect_rc 2 "$NPUC_BIN" run "$T/bad.yaml" "$cnn" -o "$T/e.safetensors"
must_match "$T/err" "^npuc: error: $T/bad.yaml:3:7: step 'quantize': unknown key 'bitz'"
printf 'steps:\n  - quantize:\n      overrides:\n        - match: nothing_here\n          bits: 4\n' >"$T/nomatch.yaml"
expect_rc 2 "$NPUC_BIN" run "$T/nomatch.yaml" "$cnn" -o "$T/e.safetensors"
must_match "$T/err" "nomatch.yaml:4:18: step 'quantize': override 'nothing_here' matches no tensor of the input"
printf 'steps:\n  - prune:\n      sparsity: 0.5\n      overrides:\n        - {match: nothing_here, sparsity: 0.2}\n' >"$T/nomatch.yaml"
expect_rc 2 "$NPUC_BIN" run "$T/nomatch.yaml" "$cnn" -o "$T/e.safetensors"
must_match "$T/err" "nomatch.yaml:5:19: step 'prune': override 'nothing_here' matches no tensor of the input"
printf 'steps:\n  - lowrank:\n      rank: 2\n      overrides:\n        - {match: fc, rank: 0}\n' >"$T/badrank.yaml"
expect_rc 2 "$NPUC_BIN" run "$T/badrank.yaml" "$cnn" -o "$T/e.safetensors"
must_match "$T/err" "^npuc: error: $T/badrank.yaml:5:29: step 'lowrank': 'rank' must be an integer from 1 to 2147483647, got 0"
printf 'steps:\n  - lowrank:\n      rank: 2\n      overrides:\n        - {match: classifier, rank: 11}\n' >"$T/bigrank.yaml"
expect_rc 2 "$NPUC_BIN" run "$T/bigrank.yaml" "$cnn" -o "$T/e.safetensors"
must_match "$T/err" "tensor 'classifier.weight': --layer-rank 'classifier=11' asks for rank 11, above min\(m, n\) = 10"
[ ! -e "$T/e.safetensors" ] || fail "a failed run wrote its output"
expect_rc 2 "$NPUC_BIN" run "$R/int8_per_channel.yaml" "$cnn" -o "$T/p.safetensors"
must_match "$T/err" "output exists \(use -f to overwrite\)"
expect_rc 2 "$NPUC_BIN" run "$R/int8_per_channel.yaml" "$T/bad.yaml" -o "$T/e.safetensors"
expect_rc 2 "$NPUC_BIN" run "$R/int8_per_channel.yaml" "$cnn"
must_match "$T/err" "missing -o OUT"
leftover=$(find "$T" -name '*.tmp' | head -5)
[ -z "$leftover" ] || fail "temporary files left: $leftover"
echo "errors ok"
