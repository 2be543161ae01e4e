# decode_budget.sh - decompression bombs: an encoded tensor that decodes to
# more than 256x its stored bytes and more than the memory budget
# (--max-memory, default 256M) is refused with exit 2 before anything is
# allocated; below the budget it decodes to the exact product (NumPy); the
# shared fuzz finds end within 10 s and 512 MB.
source "$(dirname "${BASH_SOURCE[0]}")/lib/cli_test.bash"

# A hand-made lowrank artifact (docs/artifact.md): rank 1, F32 factors.
mkbomb() { # OUT ROWS COLS
    "$PY" - "$@" <<'EOF'
import json, struct, sys
import numpy as np
out, m, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rng = np.random.default_rng(7)
a = rng.standard_normal((m, 1)).astype("<f4")
b = rng.standard_normal((1, n)).astype("<f4")
ent = {"schema": "npuc.artifact/1", "npuc_version": "0.1.0",
       "tensors": {"w": {"encoding": "lowrank", "dtype": "F32", "shape": [m, n], "layout": "oi",
                         "parts": ["w.lr_a", "w.lr_b"], "rank": 1, "matrix": [m, n], "solver": "exact"}}}
hdr = {"__metadata__": {"npuc": json.dumps(ent)},
       "w.lr_a": {"dtype": "F32", "shape": [m, 1], "data_offsets": [0, a.nbytes]},
       "w.lr_b": {"dtype": "F32", "shape": [1, n], "data_offsets": [a.nbytes, a.nbytes + b.nbytes]}}
h = json.dumps(hdr).encode()
h += b" " * (-len(h) % 8)
with open(out, "wb") as f:
    f.write(struct.pack("<Q", len(h)) + h + a.tobytes() + b.tobytes())
np.save(out + ".want.npy", a @ b)
EOF
}

# Peak RSS (KB) and wall time of a command, and its exit code, from Python.
measure() { # OUT.json CMD... (timed and measured: never under valgrind)
    NPUC_VALGRIND=0 "$PY" - "$@" <<'EOF'
import json, resource, subprocess, sys, time
t0 = time.time()
try:
    p = subprocess.run(sys.argv[2:], capture_output=True, timeout=10)
    rc, err = p.returncode, p.stderr.decode(errors="replace")
except subprocess.TimeoutExpired:
    rc, err = "timeout", ""
json.dump({"rc": rc, "secs": time.time() - t0, "err": err,
           "rss_kb": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss}, open(sys.argv[1], "w"))
EOF
}

check_refused() { # JSON WHAT
    "$PY" - "$1" "$2" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))
assert r["rc"] == 2, (sys.argv[2], r)
assert r["secs"] < 10 and r["rss_kb"] < 512 * 1024, (sys.argv[2], r)
assert "decompression bomb" in r["err"] and r["err"].count("\n") == 1, (sys.argv[2], r["err"])
EOF
}

# 16384 x 8192 floats = 512 MiB from 96 KiB stored: refused by every decoder.
mkbomb "$T/bomb.safetensors" 16384 8192
measure "$T/m1.json" "$NPUC_BIN" validate --deep "$T/bomb.safetensors"
check_refused "$T/m1.json" "validate --deep"
measure "$T/m2.json" "$NPUC_BIN" decompress "$T/bomb.safetensors" -o "$T/out.safetensors"
check_refused "$T/m2.json" "decompress"
[ ! -e "$T/out.safetensors" ] || fail "a refused decompress left an output"

# 4096 x 2048 floats = 32 MiB from 24 KiB stored: over 256x, within the
# default budget (decodes exactly), refused under --max-memory 16M.
mkbomb "$T/mid.safetensors" 4096 2048
expect_rc 2 "$NPUC_BIN" decompress "$T/mid.safetensors" -o "$T/mid_out.safetensors" --max-memory 16M
must_match "$T/err" "tensor 'w': decodes to 33554432 bytes from 24576 stored .*--max-memory"
[ ! -e "$T/mid_out.safetensors" ] || fail "a refused decompress left an output"
expect_rc 2 "$NPUC_BIN" decompress "$T/mid.safetensors" -o "$T/mid_out.safetensors" --max-memory 12Q
must_match "$T/err" "max-memory: expected a size"
expect_rc 0 "$NPUC_BIN" decompress "$T/mid.safetensors" -o "$T/mid_out.safetensors"
"$PY" - "$T/mid_out.safetensors" "$T/mid.safetensors.want.npy" <<'EOF'
import json, struct, sys
import numpy as np
b = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", b[:8])[0]
h = json.loads(b[8:8 + n])
e = h["w"]
assert e["dtype"] == "F32" and e["shape"] == [4096, 2048], e
got = np.frombuffer(b[8 + n + e["data_offsets"][0]:8 + n + e["data_offsets"][1]], "<f4").reshape(4096, 2048)
want = np.load(sys.argv[2])
# sgemm with k = 1 is one product per element: exact.
assert np.array_equal(got, want), float(np.abs(got - want).max())
EOF

# The bombs found by fuzzing (../shared/fuzz-finds), when present.
FINDS="$NPUC_SRC/../shared/fuzz-finds"
for f in "$FINDS"/lr_bomb_*.safetensors; do
    [ -f "$f" ] || continue
    for cmd in "validate --deep" "decompress"; do
        extra=(); [ "$cmd" = decompress ] && extra=(-o "$T/find_out.safetensors")
        measure "$T/mf.json" "$NPUC_BIN" $cmd "$f" "${extra[@]}"
        check_refused "$T/mf.json" "$cmd $(basename "$f")"
    done
done
echo "ok"
