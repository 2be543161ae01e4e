#!/usr/bin/env bash
# Issue 15: a > 4 GiB safetensors file with tensors past the 4 GiB offset is
# quantized, decompressed and validated correctly.
#
# The input is sparse (header written, then seeks over the hole, then the
# real tensors, then ftruncate to the exact size): a 4 GiB + 1 KiB U8 tensor
# "pad" covers the hole (safetensors needs the data region fully covered by
# tensors) with marker bytes around the 4 GiB boundary; F32 tensors with
# random values start past 2^32.  Checked against NumPy reading the files
# with its own parser (the Python below), never against npuc's output:
#   - quantize: the 2-D weights' int8 per-channel codes and scales equal the
#     independent computation of docs/quantization.md (scale = max|w| / 127,
#     codes = round-half-even(w * (1 / scale)), float32), the error is at most
#     scale / 2; the biases and the 4 GiB U8 pad are copied byte for byte
#     (the artifact is > 4 GiB too, its tensors past 2^32 as well);
#   - validate --deep on the artifact exits 0;
#   - decompress: the weights equal codes * scale, the rest equals the input.
# Needs 16 GiB free in case the file system has no holes (the artifact and
# the decompressed file are 4 GiB each; npuc writes the zero pad as holes, so
# on ext4/xfs/tmpfs they take a few hundred KiB) and about 4.3 GB of memory (npuc reads the 4 GiB tensor
# whole).  The quick passes of .ci/run run `info` on it only.
source "$(dirname "$0")/lib/cli_test.bash"
"$PY" -c "import numpy" 2>/dev/null || skip "numpy is not installed for $PY"
avail=$(df --output=avail -B1 "$T" | tail -1)
[ "$avail" -ge $((16 << 30)) ] || skip "needs 16 GiB free in $T, has $((avail >> 30)) GiB"

cat >"$T/lo.py" <<'PYEOF'
import json, os, struct, sys
import numpy as np

PAD = (1 << 32) + 1024                                           # the U8 tensor over the hole
MARK = {0: 1, 7: 2, (1 << 32) - 1: 3, 1 << 32: 4, PAD - 1: 5}   # its non-zero bytes
SHAPES = [("fc1.weight", (256, 300)), ("fc1.bias", (256,)), ("fc2.weight", (10, 256)), ("fc2.bias", (10,))]


def header(path):
    """Own safetensors parser: {name: (dtype, shape, abs_begin, abs_end)}."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        h = json.loads(f.read(n))
    h.pop("__metadata__", None)
    return {k: (v["dtype"], tuple(v["shape"]), 8 + n + v["data_offsets"][0], 8 + n + v["data_offsets"][1])
            for k, v in h.items()}


def tensor(path, info):
    dt, shape, b, e = info
    npd = np.dtype({"F32": "<f4", "I8": "i1", "U8": "u1"}[dt])
    return np.fromfile(path, dtype=npd, count=(e - b) // npd.itemsize, offset=b).reshape(shape)


def originals():
    rng = np.random.default_rng(15)
    out = {}
    for name, shape in SHAPES:
        w = rng.standard_normal(shape).astype(np.float32)
        if len(shape) == 2:  # rows with very different ranges
            w *= np.exp(rng.uniform(-4, 2, size=(shape[0], 1))).astype(np.float32)
        out[name] = w
    return out


def make(path):
    ts = originals()
    hdr, off = {"pad": {"dtype": "U8", "shape": [PAD], "data_offsets": [0, PAD]}}, PAD
    for name, shape in SHAPES:
        hdr[name] = {"dtype": "F32", "shape": list(shape), "data_offsets": [off, off + ts[name].nbytes]}
        off += ts[name].nbytes
    h = json.dumps(hdr).encode()
    h += b" " * (-len(h) % 8)
    base = 8 + len(h)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h)
        for pos, val in MARK.items():
            f.seek(base + pos)
            f.write(bytes([val]))
        for name, _ in SHAPES:
            f.write(ts[name].tobytes())
        f.truncate(base + off)
    assert header(path)["fc1.weight"][2] > 1 << 32


def data_extents(fd, b, e):
    """The parts of [b, e) that are not holes (SEEK_DATA/SEEK_HOLE; a file
    system without holes reports all of it as data).  A hole reads as zeros
    by definition, so only these need reading."""
    pos = b
    while pos < e:
        try:
            d = os.lseek(fd, pos, os.SEEK_DATA)
        except OSError:  # ENXIO: no data after pos
            return
        if d >= e:
            return
        h = min(os.lseek(fd, d, os.SEEK_HOLE), e)
        yield d, h
        pos = h


def check_pad(path, info):
    """The 4 GiB U8 tensor: zeros except the markers, its data extents read
    in 256 MiB chunks (npuc writes the zero runs as holes)."""
    dt, shape, b, e = info
    assert dt == "U8" and shape == (PAD,) and e - b == PAD, info
    step, nz = 1 << 28, 0
    fd = os.open(path, os.O_RDONLY)
    try:
        extents = list(data_extents(fd, b, e))
    finally:
        os.close(fd)
    for d, h in extents:
        for pos in range(d, h, step):
            nz += int(np.count_nonzero(np.fromfile(path, dtype="u1", count=min(step, h - pos), offset=pos)))
    assert nz == len(MARK), f"pad: {nz} non-zero bytes, expected {len(MARK)}"
    for pos, val in MARK.items():
        got = np.fromfile(path, dtype="u1", count=1, offset=b + pos)[0]
        assert got == val, f"pad byte {pos}: {got} != {val}"


def int8_ref(w):
    """docs/quantization.md, symmetric int8 per output channel (axis 0)."""
    amax = np.abs(w).max(axis=1).astype(np.float32)
    scale = np.maximum(amax / np.float32(127), np.float32(np.finfo(np.float32).tiny)).astype(np.float32)
    inv = (np.float32(1) / scale).astype(np.float32)
    v = (w * inv[:, None]).astype(np.float32)
    return np.clip(np.rint(v), -127, 127).astype(np.int8), scale


def check_quant(src, art):
    ts, hi, ha = originals(), header(src), header(art)
    assert min(v[2] for k, v in ha.items() if k != "pad") > 1 << 32, "the artifact's tensors should lie past 4 GiB"
    check_pad(art, ha["pad"])
    for name, shape in SHAPES:
        w = tensor(src, hi[name])
        assert np.array_equal(w, ts[name]), f"{name}: the input is not what was written"
        if len(shape) == 1:
            assert ha[name][:2] == ("F32", shape), ha[name]
            assert np.array_equal(tensor(art, ha[name]), w), f"{name}: not copied exactly"
            continue
        q, s = tensor(art, ha[name]), tensor(art, ha[name + ".scale"])
        qr, sr = int8_ref(w)
        assert np.array_equal(s, sr), f"{name}: scales differ from max|w|/127"
        assert np.array_equal(q, qr), f"{name}: {int(np.sum(q != qr))} codes differ from the reference"
        err = np.abs(q.astype(np.float32) * s[:, None] - w)
        assert np.all(err <= s[:, None] * 0.5001), f"{name}: error above scale/2"
    print("check-quant: codes and scales equal the reference; pad and biases copied exactly")


def check_dense(src, dense):
    ts, hd = originals(), header(dense)
    check_pad(dense, hd["pad"])
    for name, shape in SHAPES:
        d = tensor(dense, hd[name])
        assert hd[name][:2] == ("F32", shape), hd[name]
        if len(shape) == 1:
            assert np.array_equal(d, ts[name]), f"{name}: not copied exactly"
            continue
        q, s = int8_ref(ts[name])
        assert np.array_equal(d, (q.astype(np.float32) * s[:, None]).astype(np.float32)), \
            f"{name}: decompressed values are not codes * scale"
    print("check-dense: weights equal codes * scale; pad and biases exact")


{"make": lambda: make(sys.argv[2]), "check-quant": lambda: check_quant(sys.argv[2], sys.argv[3]),
 "check-dense": lambda: check_dense(sys.argv[2], sys.argv[3])}[sys.argv[1]]()
PYEOF

ms() { echo $((($(date +%s%N) - $1) / 1000000)); }
in="$T/big.safetensors"
"$PY" "$T/lo.py" make "$in"
size=$(stat -c %s "$in")
[ "$size" -gt $((4 << 30)) ] || fail "the input is only $size bytes"
echo "input: $size bytes, $(du -k "$in" | cut -f1) KiB on disk"

expect_rc 0 "$NPUC_BIN" info "$in"
must_match "$T/out" 'fc2\.weight'
# The sanitizer pass of .ci/run (NPUC_TEST_QUICK=1) stops here: the rest is
# 8 GiB of writes, I/O that the release pass already checked.  Memcheck
# (NPUC_VALGRIND=1) covers the info run above; the 4 GiB runs below stay off
# valgrind (NPUC_VALGRIND=0), which would take many minutes over them.
[ "${NPUC_TEST_QUICK:-0}" = 1 ] && skip "quick pass (sanitizers, valgrind): info only; the release pass runs quantize/validate/decompress"

s=$(date +%s%N)
expect_rc 0 env NPUC_VALGRIND=0 "$NPUC_BIN" quantize "$in" -o "$T/q.safetensors" -q
echo "quantize: $(ms "$s") ms"
q_size=$(stat -c %s "$T/q.safetensors")
[ "$q_size" -gt $((4 << 30)) ] || fail "the artifact is $q_size bytes: the 4 GiB U8 tensor was not kept"
"$PY" "$T/lo.py" check-quant "$in" "$T/q.safetensors"

# validate --deep and decompress read the artifact at the same time (they
# share the page cache: one pass over the 4 GiB instead of two).
s=$(date +%s%N)
NPUC_VALGRIND=0 "$NPUC_BIN" validate --deep "$T/q.safetensors" >"$T/v.out" 2>&1 &
vpid=$!
expect_rc 0 env NPUC_VALGRIND=0 "$NPUC_BIN" decompress "$T/q.safetensors" -o "$T/d.safetensors" -q
rc=0
wait "$vpid" || rc=$?
[ "$rc" -eq 0 ] || fail "validate --deep on the artifact: exit $rc: $(head -c 2000 "$T/v.out")"
must_match "$T/v.out" '^ok: '
echo "decompress and validate --deep: $(ms "$s") ms"
rm -f "$T/q.safetensors" # disk: at most two 4 GiB files at once
"$PY" "$T/lo.py" check-dense "$in" "$T/d.safetensors"
echo "large offsets ok: quantize, validate --deep and decompress of a $size-byte file"
