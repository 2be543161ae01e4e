#!/usr/bin/env bash
# h5_progress.sh - issue 19 item 4 for HDF5: a pass over an HDF5 model with
# a tensor of 64 MiB or more moves the byte bar inside that tensor while it
# is read (in the contained reader's child, reported over its socket, and in
# process) and while the HDF5 result is written, and the files are the same
# bytes as without progress.
#
# Inputs are written by h5py; the values npuc read are checked against
# h5py's reading of the input (a quantized value is within half a step of
# it, a step being at most max|w| / 127 for int8), and the bar's fill must
# take several values while 1 of 3 tensors is done.  -q silences the bar.
# The quick pass (sanitizers) reads a 64 MiB dataset that was never written
# (HDF5 reads its fill value: a tiny file) through every path once; the
# release pass also writes it to a .keras archive and reads random values.
source "$(dirname "${BASH_SOURCE[0]}")/lib/cli_test.bash"
have_h5py || skip "h5py is not available"

# make LAYOUT FILE...: each FILE gets tensors a [64,64], big [4096,4096],
# z [64,64] (float32, in that order), one Python run for all.  LAYOUT:
# contiguous | chunked (chunks of 100 rows, which the 16 MiB pieces do not
# divide) | empty (big never written) | small (no big).
make() {
    "$PY" - "$@" <<'EOF'
import sys
import h5py
import numpy as np
rng = np.random.default_rng(19)
for layout, path in zip(sys.argv[1::2], sys.argv[2::2]):
    with h5py.File(path, "w", track_order=True) as f:
        f["a"] = rng.standard_normal((64, 64), dtype=np.float32)
        if layout == "small":
            pass
        elif layout == "empty":
            f.create_dataset("big", shape=(4096, 4096), dtype=np.float32)
        else:
            f.create_dataset("big", data=rng.standard_normal((4096, 4096), dtype=np.float32),
                             chunks=(100, 4096) if layout == "chunked" else None)
        f["z"] = rng.standard_normal((64, 64), dtype=np.float32)
EOF
}

# fills_grow BARS PHASE: the bar's fill while tensor 1 of 3 is done, in the
# given phase ("reading" or "writing"), takes at least 3 values, growing.
fills_grow() {
    "$PY" - "$1" "$2" <<'EOF'
import re, sys
pat = r"^\[(=*)>? *\] 1/3  [0-9.]+ (B|KiB|MiB|GiB)/s  ETA [0-9:-]+  \(%s\)$" % sys.argv[2]
fills = [len(m.group(1)) for m in re.finditer(pat, open(sys.argv[1]).read(), re.M)]
assert len(set(fills)) >= 3 and fills == sorted(fills), (sys.argv[2], fills)
EOF
}

# within_step IN OUT...: every value of each OUT (a --fake-quant int8
# result) is within half an int8 step of its IN's, per h5py.
within_step() {
    "$PY" - "$@" <<'EOF'
import sys
import h5py
import numpy as np
for a, b in zip(sys.argv[1::2], sys.argv[2::2]):
    with h5py.File(a, "r") as fi, h5py.File(b, "r") as fo:
        for k in ("a", "big", "z"):
            x, y = fi[k][()], fo[k][()]
            assert x.shape == y.shape and y.dtype == np.float32, (b, k)
            half = float(np.abs(x).max()) / 127 / 2 * 1.0001
            err = float(np.abs(x.astype(np.float64) - y).max())
            assert err <= half, (b, k, err, half)
EOF
}

# run_with_bar OUT ARGS...: npuc with --progress; the bar's lines in $T/bars.
run_with_bar() {
    local out=$1
    shift
    expect_rc 0 "$NPUC_BIN" "$@" --progress -o "$out"
    tr '\r' '\n' < "$T/err" > "$T/bars"
    must_match "$T/out" '^total: 3 tensors'
}

# A model without a large tensor draws no bar (and this first, small run is
# the one the release pass runs under memcheck).
if is_quick; then
    make small "$T/small.h5" empty "$T/empty.h5"
else
    make small "$T/small.h5" empty "$T/empty.h5" contiguous "$T/c.h5" chunked "$T/k.h5"
fi
expect_rc 0 "$NPUC_BIN" quantize --progress "$T/small.h5" -o "$T/small.q.safetensors"
must_not_match "$T/err" '/s  ETA'

# A 64 MiB dataset never written (zeros, a tiny file), every path once: the
# contained reader's pieces and PROGRESS messages, the in-process reader's,
# and the chunked, deflated HDF5 output written in pieces of whole chunks.
run_with_bar "$T/empty.p.h5" quantize --fake-quant --deflate 1 "$T/empty.h5"
fills_grow "$T/bars" reading || fail "no progress while reading the large dataset"
fills_grow "$T/bars" writing || fail "no progress while writing the large dataset (deflate)"
expect_rc 0 "$NPUC_BIN" quantize --fake-quant --deflate 1 "$T/empty.h5" -o "$T/empty.n.h5"
cmp "$T/empty.p.h5" "$T/empty.n.h5" || fail "the deflated output differs with --progress"
if is_quick; then
    NPUC_H5_INPROCESS=1 run_with_bar "$T/empty.i.h5" quantize --fake-quant --deflate 1 "$T/empty.h5"
    fills_grow "$T/bars" reading || fail "no progress while reading in process"
    cmp "$T/empty.i.h5" "$T/empty.n.h5" || fail "the in-process output differs with --progress"
    echo "h5_progress: ok (quick)"
    exit 0
fi
# A .keras output goes through the same HDF5 writer (its model.weights.h5).
run_with_bar "$T/empty.p.keras" quantize --fake-quant --deflate 1 "$T/empty.h5"
fills_grow "$T/bars" writing || fail "no progress while writing a .keras archive"
rm -f "$T"/empty.*

# Random values (--deflate 0: the contiguous output written in pieces;
# deflating 64 MiB of noise would cost seconds): contiguous input read in
# process (NPUC_H5_INPROCESS=1), then chunked input read in whole chunks by
# the contained reader.  -q silences the bar, and -q's output (no progress:
# one call each) is the same bytes.  Values checked by h5py.
NPUC_H5_INPROCESS=1 run_with_bar "$T/c.p.h5" quantize --fake-quant --deflate 0 "$T/c.h5"
fills_grow "$T/bars" reading || fail "contiguous: no progress while reading in process"
fills_grow "$T/bars" writing || fail "contiguous: no progress while writing"
expect_rc 0 "$NPUC_BIN" quantize --fake-quant --deflate 0 -q --progress "$T/c.h5" -o "$T/c.n.h5"
must_be_empty "$T/err"
cmp "$T/c.p.h5" "$T/c.n.h5" || fail "contiguous: the output differs with --progress"
run_with_bar "$T/k.p.h5" quantize --fake-quant --deflate 0 "$T/k.h5"
fills_grow "$T/bars" reading || fail "chunked: no progress while reading"
within_step "$T/c.h5" "$T/c.p.h5" "$T/k.h5" "$T/k.p.h5" || fail "values read wrongly"

echo "h5_progress: ok"
