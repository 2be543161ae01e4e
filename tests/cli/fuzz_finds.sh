# fuzz_finds.sh - every input in ../shared/fuzz-finds (files that crashed,
# hung or blew up npuc; see its README) run through the commands the README
# names ends with exit 1 or 2 within 10 s and under 512 MB, with one stderr
# line naming the file: HDF5 files through `info` and `validate --deep`
# (libhdf5 itself crashes or spins on three of them: the contained reader,
# docs/hdf5-containment.md, turns that into an error), artifacts through
# `validate --deep` and `decompress`, recipes through `run` on a sample
# model.  Skips when the folder is absent.
#
# The memory cap is an address-space limit (prlimit --as), which an
# AddressSanitizer build cannot live under (it reserves terabytes of shadow
# memory): there the cap is dropped and the peak RSS is still checked.  With
# NPUC_H5_INPROCESS=1 in the environment this test fails (SIGSEGV, timeout),
# which shows it can.
source "$(dirname "${BASH_SOURCE[0]}")/lib/cli_test.bash"

FINDS="$NPUC_SRC/../shared/fuzz-finds"
[ -d "$FINDS" ] || skip "$FINDS is absent"
command -v prlimit >/dev/null || skip "prlimit (util-linux) is absent"

ASAN=0
if [ -n "${NPUC_SANITIZE:-}" ] && [ "${NPUC_SANITIZE}" != 0 ]; then ASAN=1; fi
# NPUC_BIN is the test wrapper; the sanitizers are in the real binary.
# (grep without -q reads all of nm's output: -q would stop early, nm would die of
# SIGPIPE, and pipefail would call the binary unsanitized.)
if nm "${NPUC_REAL_BIN:-$NPUC_BIN}" 2>/dev/null | grep '__asan_init' >/dev/null; then ASAN=1; fi
# Under the valgrind pass (NPUC_VALGRIND=1) valgrind needs more address space
# than the cap and runs npuc many times slower: no cap, a longer time limit;
# the release pass checks both limits.
[ "${NPUC_VALGRIND:-0}" = 1 ] && ASAN=2

SAMPLE="$SAMPLES/cnn_bn.safetensors"
n=0
for f in "$FINDS"/*; do
    case "$f" in
    *.h5) cmds=("info" "validate --deep") ;;
    *.safetensors) cmds=("validate --deep" "decompress") ;;
    *.yaml) cmds=("run") ;;
    *) continue ;;
    esac
    for c in "${cmds[@]}"; do
        case "$c" in
        decompress) args=(decompress "$f" -o "$T/out.safetensors") ;;
        run) args=(run "$f" "$SAMPLE" -o "$T/out.safetensors") ;;
        *) read -r -a args <<<"$c" && args+=("$f") ;;
        esac
        "$PY" - "$ASAN" "$f" "$T/out.safetensors" "$NPUC_BIN" "${args[@]}" <<'PYEOF'
import os, resource, subprocess, sys, time
asan, path, out, npuc, args = sys.argv[1] != "0", sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5:]
limit = 120 if sys.argv[1] == "2" else 10
cap = 512 << 20
cmd = [npuc] + args
if not asan:
    cmd = ["prlimit", f"--as={cap}", "--"] + cmd
env = dict(os.environ)
if asan:
    # libfyaml's own leak on recipe_leak_quoted_scalar.yaml is not npuc's.
    env["ASAN_OPTIONS"] = env.get("ASAN_OPTIONS", "") + ":detect_leaks=0"
name = os.path.basename(path) + " [" + " ".join(args[:1]) + "]"
t0 = time.time()
try:
    # timeout kills the whole process group: a contained reader left behind
    # would show up as a hang here too.
    p = subprocess.run(cmd, capture_output=True, timeout=limit, env=env, start_new_session=True)
except subprocess.TimeoutExpired:
    sys.exit(f"FAIL: {name}: still running after {limit} s")
dt = time.time() - t0
err = p.stderr.decode(errors="replace")
rss_kb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
if asan and sys.argv[1] == "1" and "ERROR: AddressSanitizer" in err:
    # Under ASan the contained HDF5 reader (a fork of this process) reports
    # libhdf5's own memory error on stderr before it dies; npuc then prints its
    # one line.  Accept that only when the faulting frame (the first one past
    # the sanitizer's interceptor) is inside libhdf5.
    import re
    report, _, last = err.rstrip("\n").rpartition("\n")
    frames = re.findall(r"^\s+#(\d+) 0x[0-9a-f]+ (?:in (\S+) )?\(?([^\s)]*)", report, re.M)
    first = next((f for f in frames if "sanitizer" not in f[2] and "__interceptor" not in (f[1] or "")), None)
    if first is None or "libhdf5" not in first[2]:
        sys.exit(f"FAIL: {name}: a sanitizer report whose fault is not inside libhdf5: {report[:2000]}")
    err = last + "\n"
ok = p.returncode in (1, 2) and err.count("\n") == 1 and path in err and err.startswith("npuc: error: ")
print(f"{name}: exit {p.returncode} in {dt:.2f} s, peak RSS {rss_kb // 1024} MiB: {err.strip()[:160]}")
if not ok:
    sys.exit(f"FAIL: {name}: want exit 1 or 2 and one line naming the file, got exit {p.returncode}: {err!r}")
if sys.argv[1] != "2" and rss_kb * 1024 >= cap:
    sys.exit(f"FAIL: {name}: peak RSS {rss_kb} KiB")
if os.path.exists(out):
    sys.exit(f"FAIL: {name}: left an output")
PYEOF
        n=$((n + 1))
    done
done
[ "$n" -gt 0 ] || skip "no inputs in $FINDS"
echo "ok: $n runs"
