#!/usr/bin/env bash
# A write that fails half-way (here: a file-size limit, `ulimit -f`, which
# fails write() with EFBIG exactly as a full disk fails it with ENOSPC):
# exit 1, one line naming the output, the tensor and the reason, no output
# file and no temporary file left, the input untouched.  Covers the
# safetensors writer, the HDF5 writer (HDF5 1.10 used to crash at exit
# after such a failure), quantize, and `npuc run` with a streamed quantize
# step.
source "$(dirname "$0")/lib/cli_test.bash"

"$PY" - "$T/big.safetensors" <<'PY'
import json, struct, sys
import numpy as np
rng = np.random.default_rng(0)
ts = {f"l{i}.weight": rng.standard_normal((512, 1024)).astype(np.float32) for i in range(4)}
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
in="$T/big.safetensors" # 4 x 2 MiB
sum0=$(sha256sum "$in" | cut -d' ' -f1)
mkdir "$T/o"
cat >"$T/r.yaml" <<'EOF'
version: 1
steps:
  - prune:
      sparsity: 0.5
  - quantize:
      bits: 8
      fake_quant: true
EOF

limited() { # limited KIB CMD...: CMD with files capped at KIB KiB
    local kib=$1
    shift
    (
        ulimit -f "$kib"
        exec "$@"
    )
}

n=0
while read -r kib name cmd; do
    n=$((n + 1))
    out="$T/o/$name"
    # shellcheck disable=SC2086
    expect_rc 1 limited "$kib" "$NPUC_BIN" $cmd -o "$out"
    [ "$(wc -l <"$T/err")" -eq 1 ] || fail "$name: not one line: $(cat "$T/err")"
    must_match "$T/err" "^npuc: error: .*$name.*tensor 'l[0-9]\.weight'.*File too large"
    [ -z "$(ls -A "$T/o")" ] || fail "$name: left $(ls -A "$T/o")"
    [ "$(sha256sum "$in" | cut -d' ' -f1)" = "$sum0" ] || fail "$name: the input changed"
    # Without the limit the same command works: the failure was the limit's.
    expect_rc 0 "$NPUC_BIN" $cmd -o "$out" -q
    rm -f "$out"
done <<EOF
5000 c.safetensors convert $in
5000 c.h5 convert $in
5000 q.safetensors quantize --fake-quant $in
5000 r.safetensors run $T/r.yaml $in
EOF
[ "$n" -eq 4 ] || fail "ran $n cases"
echo "file-size limit: ok"

# A real full filesystem (issue 33): a 16 MiB ext4 image (no journal),
# loop-mounted, and a tmpfs of size=8m, each taking a 20 MiB model until
# the disk is full.
# On ext4 the runs make the output durable while they write, with a 1 MiB
# chunk and a 2 MiB window (NPUC_WRITEBACK=1,2: src/core/writeback.c's
# helper fdatasyncs every MiB), so the error may come from write() or from
# the helper's fdatasync; on tmpfs the writeback is off.  Either way: exit 1, one line naming the output and
# "No space left on device", nothing at the output path and no temporary
# file, the space given back.  Mounting needs root and a kernel that lets
# this sandbox mount; without them this part is skipped with a message.
"$PY" "$TESTLIB/io_models.py" dense "$T/b20.safetensors" 5 1024 1024
mnt="$T/mnt"
mkdir "$mnt"
umount_mnt() { mountpoint -q "$mnt" && umount "$mnt"; return 0; }
trap 'rc=$?; umount_mnt; cli_test_exit $rc' EXIT
full_fs() { # full_fs LABEL: the cases on the filesystem mounted at $mnt
    local label=$1 name cmd free0
    free0=$(df --output=avail -B1 "$mnt" | tail -1)
    while read -r name cmd; do
        out="$mnt/$name"
        # shellcheck disable=SC2086
        expect_rc 1 "$NPUC_BIN" $cmd -q -o "$out"
        [ "$(wc -l <"$T/err")" -eq 1 ] || fail "$label $name: not one line: $(cat "$T/err")"
        must_match "$T/err" "^npuc: error: .*$name.*No space left on device"
        [ -z "$(ls -A "$mnt" | grep -v '^lost+found$')" ] || fail "$label $name: left $(ls -A "$mnt")"
        [ "$(df --output=avail -B1 "$mnt" | tail -1)" -ge $((free0 - 65536)) ] || fail "$label $name: the space was not given back"
    done <<EOF
c.safetensors convert $T/b20.safetensors
c.gguf convert $T/b20.safetensors --gguf-type f32
c.h5 convert $T/b20.safetensors
EOF
    echo "$label: full mid-write: exit 1, one line, nothing published"
}
mounted=0
if [ "$(id -u)" -eq 0 ] && command -v mkfs.ext4 >/dev/null && truncate -s 16M "$T/fs.img" &&
    mkfs.ext4 -q -F -O ^has_journal "$T/fs.img" >/dev/null 2>&1 && mount -o loop "$T/fs.img" "$mnt" 2>"$T/mount.err"; then
    export NPUC_WRITEBACK=1,2 # the writeback helper at work: its errors too
    full_fs "ext4 (loop, 16 MiB)"
    unset NPUC_WRITEBACK
    umount_mnt
    mounted=$((mounted + 1))
fi
rm -f "$T/fs.img"
if [ "$(id -u)" -eq 0 ] && mount -t tmpfs -o size=8m tmpfs "$mnt" 2>>"$T/mount.err"; then
    full_fs "tmpfs (size=8m)"
    umount_mnt
    mounted=$((mounted + 1))
fi
[ "$mounted" -gt 0 ] || echo "SKIP (part): no small filesystem could be mounted here (not root, or no mount in this sandbox): $(head -c 300 "$T/mount.err" 2>/dev/null)"
echo "ok"
