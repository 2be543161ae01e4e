#!/usr/bin/env bash
# GPTQ and calibration files (issue 17):
#  - codes against a NumPy GPTQ written in tests/cli/lib/gptq_check.py from the paper
#    (correlated inputs with a dead column): int4 g128, int3 per channel, act-order,
#    asymmetric g32: >= 99.9 % identical codes, output error within 1 % of the
#    reference's and below round-to-nearest's with the same scales;
#  - W.hessian + W.hessian_count gives the codes W.input gives; HDF5 calibration
#    files (h5py, chunked + gzip) give the artifacts safetensors ones do; byte-identical
#    artifacts for -j 1 and -j 2; a recipe reaches the same options;
#  - a tensor without calibration data rounds to nearest with a note, or exit 2
#    under --strict; --method gptq without --calib is exit 2; --grid full runs;
#  - --calib with --range mse lowers the importance-weighted error (NumPy);
#  - samples/calib/dump_calib.py's file drives GPTQ (when torch is present).
# NPUC_TEST_QUICK=1 (the sanitizer pass) checks one scheme of each kind.
source "$(dirname "$0")/lib/cli_test.bash"
"$PY" -c "import numpy" 2>/dev/null || skip "numpy is not installed"
G="$TESTLIB/gptq_check.py"
"$PY" "$G" make "$T"
m="$T/model.safetensors"
cal="$T/calib.safetensors"
q() { "$NPUC_BIN" quantize -q --quantize-all --method gptq "$m" -f "$@" >/dev/null; }
# The memcheck pass (NPUC_VALGRIND=1) takes a test's first run: GPTQ of the
# small layer only (the 160 x 640 one costs half a minute under valgrind).
q --calib "$cal" --bits 4 -g 128 --include '^fc2\.' -o "$T/vg.safetensors"

schemes=("4 128 0 --bits 4 -g 128" "3 0 0 --bits 3" "4 128 1 --bits 4 -g 128 --act-order"
         "4 32 1 --bits 4 -g 32 --asymmetric --act-order")
[ "${NPUC_TEST_QUICK:-0}" = 1 ] && schemes=("${schemes[0]}" "${schemes[3]}")
for s in "${schemes[@]}"; do
    read -r bits group act flags <<<"$s"
    # shellcheck disable=SC2086
    q --calib "$cal" $flags -o "$T/a.safetensors" || fail "gptq $flags failed"
    "$PY" "$G" check "$T" "$T/a.safetensors" fc1.weight,fc2.weight "$bits" "$group" "$act" ||
        fail "$flags: GPTQ differs from the reference"
done

# The Hessian file gives the codes the inputs give (sums rounded differently).
q --calib "$cal" --bits 4 -g 128 -o "$T/in.safetensors"
q --calib "$T/calib_h.safetensors" --bits 4 -g 128 -o "$T/h.safetensors"
"$PY" "$G" same "$T/in.safetensors" "$T/h.safetensors" fc1.weight,fc2.weight || fail "W.hessian and W.input disagree"

# HDF5 calibration files (issue 17 item 1): h5py writes the same tensors as
# root datasets (W.input chunked and gzip-compressed, W.hessian contiguous);
# the artifacts are byte-identical to those from the safetensors files.
if "$PY" -c "import h5py" 2>/dev/null; then
    "$PY" - "$cal" "$T/calib_h.safetensors" "$T" "$TESTLIB" <<'PY' || fail "h5py could not write the calibration files"
import sys
import h5py
import numpy as np
sys.path.insert(0, sys.argv[4])
import npuc_test
NP = {"F32": np.float32, "F64": np.float64, "I64": np.int64}
for src, dst in ((sys.argv[1], "calib.h5"), (sys.argv[2], "calib_h.h5")):
    with h5py.File(sys.argv[3] + "/" + dst, "w") as f:
        for name, dt, shape, data in npuc_test.read_st(src)[1]:
            a = np.frombuffer(data, dtype=NP[dt]).reshape(shape)
            if name.endswith(".input"):
                f.create_dataset(name, data=a, chunks=(min(37, a.shape[0]),) + a.shape[1:], compression="gzip")
            else:
                f[name] = a
PY
    q --calib "$T/calib.h5" --bits 4 -g 128 -o "$T/in5.safetensors"
    cmp -s "$T/in.safetensors" "$T/in5.safetensors" || fail "--calib calib.h5 (W.input) gives another artifact"
    q --calib "$T/calib_h.h5" --bits 4 -g 128 -o "$T/h5.safetensors"
    cmp -s "$T/h.safetensors" "$T/h5.safetensors" || fail "--calib calib_h.h5 (W.hessian) gives another artifact"
fi

# A stored Hessian is converted and checked on the context's threads (K >= 512):
# an asymmetric one and one holding NaN are refused, naming the file and tensor;
# no output is written.
"$PY" - "$T" "$SAMPLES/calib" <<'PY' || fail "could not write the bad Hessians"
import sys
import numpy as np
sys.path.insert(0, sys.argv[2])
from dump_calib import write_safetensors as write_st
d, K = sys.argv[1], 512
rng = np.random.default_rng(3)
write_st(d + "/big.safetensors", [("big.weight", rng.standard_normal((8, K), dtype=np.float32))])
B = rng.standard_normal((K, 64))
H = B @ B.T
cnt = ("big.weight.hessian_count", np.array([64], np.int64))
A = H.copy(); A[500, 3] += 1.0  # lower triangle, a late row block
write_st(d + "/asym.safetensors", [("big.weight.hessian", A), cnt])
N = H.copy(); N[7, 450] = np.nan
write_st(d + "/nanh.safetensors", [("big.weight.hessian", N), cnt])
PY
for b in asym:"is not symmetric" nanh:"holds NaN or Inf"; do
    expect_rc 2 "$NPUC_BIN" quantize -q --quantize-all --method gptq -b 4 --calib "$T/${b%%:*}.safetensors" \
        "$T/big.safetensors" -o "$T/bad.safetensors" -f
    must_match "$T/err" "${b%%:*}\.safetensors: tensor 'big\.weight\.hessian': ${b#*:}"
    [ ! -e "$T/bad.safetensors" ] || fail "a refused Hessian left an output"
done

# -j 1 == -j 2, byte for byte.
q --calib "$cal" --bits 3 -g 128 --act-order -j 1 -o "$T/j1.safetensors"
q --calib "$cal" --bits 3 -g 128 --act-order -j 2 -o "$T/j2.safetensors"
cmp -s "$T/j1.safetensors" "$T/j2.safetensors" || fail "-j 1 and -j 2 artifacts differ"

# A recipe takes the same keys.
cat >"$T/r.yaml" <<YAML
version: 1
steps:
  - quantize:
      bits: 3
      group_size: 128
      act_order: true
      method: gptq
      calib: calib.safetensors
      quantize_all: true
YAML
expect_rc 0 "$NPUC_BIN" run -q "$T/r.yaml" "$m" -o "$T/r.safetensors" -f
npuc_py compare "$T/j1.safetensors" "$T/r.safetensors" || fail "the recipe's artifact differs from the command line's"

# No calibration data: a note, or exit 2 under --strict.
expect_rc 0 "$NPUC_BIN" quantize --quantize-all --method gptq --calib "$cal" -b 4 "$m" -o "$T/n.safetensors" -f
grep -q 'emb.weight.*no calibration data: round to nearest' "$T/out" || fail "no note for emb.weight: $(cat "$T/out")"
expect_rc 2 "$NPUC_BIN" quantize --strict --quantize-all --method gptq --calib "$cal" -b 4 "$m" -o "$T/s.safetensors" -f
grep -q "tensor 'emb.weight': no calibration data" "$T/err" || fail "--strict message: $(cat "$T/err")"
[ ! -e "$T/s.safetensors" ] || fail "--strict wrote an output"
expect_rc 2 "$NPUC_BIN" quantize --method gptq -b 4 "$m" -o "$T/s.safetensors" -f
grep -q -- "--calib" "$T/err" || fail "gptq without --calib: $(cat "$T/err")"

# The full grid under GPTQ: codes reach -2^(b-1).
q --calib "$cal" --bits 4 -g 128 --grid full -o "$T/f.safetensors"
"$PY" -c "
import sys; sys.path.insert(0, '$TESTLIB')
import gptq_check as g
q = g.codes_of('$T/f.safetensors', 'fc1.weight')[0]
sys.exit(0 if q.min() == -8 and q.max() <= 7 else 1)" || fail "--grid full: codes outside -8..7 or -8 never used"
# --calib with --range mse (round to nearest): importance-weighted ranges.
"$NPUC_BIN" quantize -q --quantize-all -b 4 -g 32 --range mse "$m" -o "$T/u.safetensors" -f >/dev/null
expect_rc 0 "$NPUC_BIN" quantize --quantize-all -b 4 -g 32 --range mse --calib "$cal" "$m" -o "$T/w.safetensors" -f
grep -q 'emb.weight.*no calibration data: unweighted mse' "$T/out" || fail "no note for emb.weight: $(cat "$T/out")"
"$PY" "$G" imp "$T" "$T/w.safetensors" "$T/u.safetensors" fc1.weight,fc2.weight || fail "weighted mse is not better"

# samples/calib/dump_calib.py (needs torch; not in the quick pass): its file drives GPTQ,
# which beats round to nearest over the layers of its demo model (a conv and two linears).
if [ "${NPUC_TEST_QUICK:-0}" != 1 ] && "$PY" -c "import torch" 2>/dev/null; then
    "$PY" "$SAMPLES/calib/dump_calib.py" --demo --inputs "$T/demo.safetensors"
    dm="$T/demo.safetensors.model.safetensors"
    "$NPUC_BIN" quantize -q --quantize-all -b 4 --method gptq --calib "$T/demo.safetensors" "$dm" -o "$T/dg.safetensors" >/dev/null
    "$NPUC_BIN" quantize -q --quantize-all -b 4 "$dm" -o "$T/dr.safetensors" >/dev/null
    "$PY" "$G" demo "$dm" "$T/demo.safetensors" "$T/dg.safetensors" "$T/dr.safetensors" || fail "dump_calib.py demo: GPTQ not better"
fi
echo "gptq: ${#schemes[@]} schemes against the NumPy reference; hessian == input; -j; recipe; fallbacks"
