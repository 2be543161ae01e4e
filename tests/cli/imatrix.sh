#!/usr/bin/env bash
# llama.cpp importance matrices (issue 29, item 2):
#  - `npuc calibrate CALIB... --imatrix-out FILE` writes the legacy .dat from the <weight>.input
#    rows (rank 2 and 3, F32 and F16, one weight's rows split over two files): a reader written
#    here from the format description (Python struct) finds the entries in name order, ncall =
#    the row count and values / ncall = NumPy's mean of x^2 in float64, within float32 rounding;
#  - `npuc convert --imatrix` loads it (and a GGUF-format imatrix written here) against a model
#    whose weights match: no warning; a model whose width differs: one line naming the entry and
#    tensor, exit 2, nothing written (also a MoE weight of 3 experts against an entry of 2); the
#    GGUF imatrix matches a 3-D MoE weight [2, 8, 64] with 2 x 64 values; weights without an
#    entry, entries matching no tensor, a count of 0 and an unquantized output type are warnings
#    naming them; an --imatrix file that is not one: exit 2;
#  - errors: no <weight>.input rows (exit 2), NaN rows (exit 2, nothing written), an existing
#    output without -f (exit 2).
source "$(dirname "$0")/lib/cli_test.bash"
"$PY" -c "import numpy" 2>/dev/null || skip "numpy is not installed"

"$PY" - "$T" "$TESTLIB" <<'PY' || fail "could not write the test files"
import sys
import numpy as np
d = sys.argv[1]
sys.path.insert(0, sys.argv[2])
import io_models
write_st = lambda path, tensors: io_models.write(path, tensors, keep_dtype=True)
rng = np.random.default_rng(29)
# Heavy-tailed rows with outlier columns.
q = (rng.standard_t(3, size=(300, 64)) * np.linspace(0.1, 30, 64)).astype(np.float32)
f1 = rng.standard_normal((2, 50, 96)).astype(np.float16)
f2 = (rng.standard_normal((70, 96)) * 4).astype(np.float16)
write_st(d + "/cal1.safetensors", [("blk.0.attn_q.weight.input", q), ("fc2.weight.input", f1),
                                   ("relu1", rng.standard_normal((10, 8)).astype(np.float32))])
write_st(d + "/cal2.safetensors", [("fc2.weight.input", f2)])
exp = {"blk.0.attn_q.weight": (300, np.mean(q.astype(np.float64) ** 2, axis=0)),
       "fc2.weight": (170, np.mean(np.concatenate([f1.reshape(-1, 96), f2]).astype(np.float64) ** 2, axis=0))}
np.save(d + "/expect.npy", np.array([exp], dtype=object), allow_pickle=True)
# Models: matching widths, and one whose fc2 is 95 wide.
w = lambda *s: rng.standard_normal(s).astype(np.float32)
write_st(d + "/model.safetensors", [("blk.0.attn_q.weight", w(32, 64)), ("fc2.weight", w(16, 96)),
                                    ("fc3.weight", w(8, 32)), ("fc2.bias", w(16))])
write_st(d + "/wide.safetensors", [("blk.0.attn_q.weight", w(32, 64)), ("fc2.weight", w(16, 128))])
# A MoE weight [experts, rows, cols] takes experts x cols values.
write_st(d + "/moe.safetensors", [("blk.0.attn_q.weight", w(32, 64)), ("fc2.weight", w(16, 96)),
                                  ("blk.0.ffn_up_exps.weight", w(2, 8, 64))])
write_st(d + "/moe3.safetensors", [("blk.0.ffn_up_exps.weight", w(3, 8, 64))])
nan = q.copy(); nan[7, 3] = np.nan
write_st(d + "/nan.safetensors", [("x.weight.input", nan)])
write_st(d + "/acts.safetensors", [("relu1", w(10, 8))])
PY

out="$T/m.imatrix"
"$NPUC_BIN" calibrate "$T/cal1.safetensors" "$T/cal2.safetensors" --imatrix-out "$out" 2>"$T/err" ||
    fail "calibrate --imatrix-out failed: $(cat "$T/err")"
grep -q "wrote $out: llama.cpp importance matrix (legacy format), 2 entries" "$T/err" || fail "no summary line: $(cat "$T/err")"

"$PY" - "$out" "$T/expect.npy" "$T/cal1.safetensors" <<'PY' || fail "the imatrix differs from NumPy's mean of x^2"
import struct, sys
import numpy as np
b = open(sys.argv[1], "rb").read()
exp = np.load(sys.argv[2], allow_pickle=True)[0]
pos = 0
def i32():
    global pos
    v = struct.unpack_from("<i", b, pos)[0]; pos += 4; return v
n = i32()
names = []
for _ in range(n):
    ln = i32(); name = b[pos:pos + ln].decode(); pos += ln
    ncall, nval = i32(), i32()
    vals = np.frombuffer(b, "<f4", nval, pos); pos += 4 * nval
    rows, mean = exp[name]
    assert ncall == rows, (name, ncall, rows)
    assert nval == mean.size, (name, nval)
    # llama-quantize divides the float32 values by ncall in float32.
    got = (vals / np.float32(ncall)).astype(np.float32)
    rel = np.max(np.abs(got - mean) / mean)
    assert rel < 2e-6, (name, rel)
    names.append(name)
assert names == sorted(exp), names
last, dl = i32(), i32()
assert last == 300, last
assert b[pos:pos + dl].decode() == sys.argv[3], b[pos:pos + dl]
assert pos + dl == len(b), "bytes after the trailer"
print("imatrix: %d entries equal NumPy's mean of x^2" % n)
PY

# The imatrix against models.
"$NPUC_BIN" convert "$T/model.safetensors" -o "$T/m.gguf" --gguf-type q8_0 --imatrix "$out" 2>"$T/err" ||
    fail "convert --imatrix failed: $(cat "$T/err")"
grep -q "1 of 3 quantized tensors have no imatrix entry (first: 'fc3.weight')" "$T/err" ||
    fail "no warning for fc3.weight: $(cat "$T/err")"
if grep -q "matching no tensor" "$T/err"; then fail "entries reported unmatched: $(cat "$T/err")"; fi
"$NPUC_BIN" convert "$T/model.safetensors" -o "$T/m2.gguf" --gguf-type q8_0 2>/dev/null
cmp -s "$T/m.gguf" "$T/m2.gguf" || fail "--imatrix changed the Q8_0 bytes (Q8_0 takes no importance)"

rc=0
"$NPUC_BIN" convert "$T/wide.safetensors" -o "$T/w.gguf" --gguf-type q4_0 --imatrix "$out" 2>"$T/err" || rc=$?
[ "$rc" = 2 ] || fail "a width mismatch: exit $rc, expected 2"
[ "$(grep -c "entry 'fc2.weight' has 96 values, tensor 'fc2.weight' needs 128" "$T/err")" = 1 ] ||
    fail "no one-line message for the width mismatch: $(cat "$T/err")"
[ ! -e "$T/w.gguf" ] || fail "output written despite the error"

"$NPUC_BIN" convert "$T/acts.safetensors" -o "$T/a.gguf" --gguf-type q4_0 --imatrix "$out" 2>"$T/err" || true
grep -q "2 imatrix entries matching no tensor: 'blk.0.attn_q.weight', 'fc2.weight'" "$T/err" ||
    fail "no warning for unmatched entries: $(cat "$T/err")"

rc=0
"$NPUC_BIN" convert "$T/model.safetensors" -o "$T/x.gguf" --gguf-type q4_0 --imatrix "$T/acts.safetensors" \
    2>"$T/err" || rc=$?
[ "$rc" = 2 ] || fail "a safetensors file as --imatrix: exit $rc, expected 2"
[ "$(wc -l <"$T/err")" = 1 ] || fail "not one line: $(cat "$T/err")"

# A GGUF-format imatrix (in_sum2 / counts, written here from ggml's gguf layout): the same
# importance; a count of 0 is a named warning (importance 1, as llama-quantize).
"$PY" - "$T" <<'PY' || fail "could not write the GGUF imatrix"
import struct, sys
import numpy as np
d = sys.argv[1]
exp = np.load(d + "/expect.npy", allow_pickle=True)[0]
def s(x): x = x.encode(); return struct.pack("<Q", len(x)) + x
kv = [s("general.type") + struct.pack("<I", 8) + s("imatrix"),
      s("imatrix.datasets") + struct.pack("<IIQ", 9, 8, 1) + s("cal1.safetensors"),
      s("imatrix.chunk_count") + struct.pack("<II", 4, 3),
      s("imatrix.chunk_size") + struct.pack("<II", 4, 512)]
ts, data = [], b""
exp["blk.0.ffn_up_exps.weight"] = (10, np.ones(128))
for name, (rows, mean) in sorted(exp.items()):
    cnt = [0.0] if name == "fc2.weight" else [float(rows)] * (mean.size // 64 if "exps" in name else 1)
    for tn, arr, ne in ((name + ".in_sum2", (mean * rows).astype("<f4"), (mean.size // len(cnt), len(cnt))),
                        (name + ".counts", np.array(cnt, "<f4"), (1, len(cnt)))):
        ts.append(s(tn) + struct.pack("<I", 2) + struct.pack("<QQ", *ne) + struct.pack("<IQ", 0, len(data)))
        data += arr.tobytes() + b"\0" * ((32 - arr.nbytes % 32) % 32)
hdr = b"GGUF" + struct.pack("<IQQ", 3, len(ts), len(kv)) + b"".join(kv) + b"".join(ts)
hdr += b"\0" * ((32 - len(hdr) % 32) % 32)
open(d + "/m.imatrix.gguf", "wb").write(hdr + data)
PY
"$NPUC_BIN" convert "$T/moe.safetensors" -o "$T/g.gguf" --gguf-type q4_0 --imatrix "$T/m.imatrix.gguf" \
    2>"$T/err" || fail "convert with a GGUF imatrix failed: $(cat "$T/err")"
grep -q "1 entry with a count of 0 (partial data: 'fc2.weight')" "$T/err" ||
    fail "no warning for the zero count: $(cat "$T/err")"
if grep -q "no imatrix entry\|matching no tensor" "$T/err"; then fail "the MoE weight did not match: $(cat "$T/err")"; fi
rc=0
"$NPUC_BIN" convert "$T/moe3.safetensors" -o "$T/g3.gguf" --gguf-type q4_0 --imatrix "$T/m.imatrix.gguf" \
    2>"$T/err" || rc=$?
[ "$rc" = 2 ] && grep -q "entry 'blk.0.ffn_up_exps.weight' has 128 values, tensor 'blk.0.ffn_up_exps.weight' needs 192 (3 matrices of 64 input columns)" "$T/err" ||
    fail "3 experts against an imatrix of 2: exit $rc: $(cat "$T/err")"
# A type that is not quantized uses no importance: said once.
"$NPUC_BIN" convert "$T/moe.safetensors" -o "$T/f.gguf" --imatrix "$T/m.imatrix.gguf" 2>"$T/err" ||
    fail "f16 with --imatrix failed"
grep -q "is not used: no tensor is stored in a quantized type" "$T/err" || fail "no 'not used' warning: $(cat "$T/err")"

# Errors.
rc=0
"$NPUC_BIN" calibrate "$T/acts.safetensors" --imatrix-out "$T/none.dat" 2>"$T/err" || rc=$?
[ "$rc" = 2 ] && grep -q "no <weight>.input tensor" "$T/err" || fail "no .input rows: exit $rc: $(cat "$T/err")"
rc=0
"$NPUC_BIN" calibrate "$T/nan.safetensors" --imatrix-out "$T/nan.dat" 2>"$T/err" || rc=$?
[ "$rc" = 2 ] && grep -q "tensor 'x.weight.input': row 7, column 3 is NaN" "$T/err" ||
    fail "NaN rows: exit $rc: $(cat "$T/err")"
[ ! -e "$T/nan.dat" ] || fail "an imatrix was written despite NaN rows"
rc=0
"$NPUC_BIN" calibrate "$T/cal1.safetensors" --imatrix-out "$out" 2>"$T/err" || rc=$?
[ "$rc" = 2 ] && grep -q "exists" "$T/err" || fail "an existing output without -f: exit $rc"
# (the real binary: the input guard would call the replaced output a modified input)
"$NPUC_REAL_BIN" calibrate "$T/cal1.safetensors" --imatrix-out "$out" -f -q 2>"$T/err" || fail "-f did not overwrite"
[ ! -s "$T/err" ] || fail "-q printed: $(cat "$T/err")"
echo "ok"
