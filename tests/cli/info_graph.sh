# info_graph.sh - `npuc info --graph` and the "graph" of `npuc info --json`
# (issue 28).  The expected graphs are read independently here, with
# Python's json (and h5py for the shared Keras file): every layer of a
# model_config is one node reading exactly the layers its inbound node names,
# and every Keras weight hangs on its layer's node.  Then hostile model_config
# texts carried as safetensors metadata: duplicate keys, a cycle, a layer
# consuming itself, a depth bomb, more layers than the limit: one line on
# stderr naming the file, exit 2, within a time limit.
source "$(dirname "${BASH_SOURCE[0]}")/lib/cli_test.bash"

# A safetensors file with one tensor and a model_config metadata entry.
st_with_config() { # OUT CONFIG_FILE
    "$PY" - "$1" "$2" <<'EOF'
import json, struct, sys
cfg = open(sys.argv[2]).read()
h = json.dumps({"__metadata__": {"model_config": cfg},
                "d/kernel": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 16]}}).encode()
open(sys.argv[1], "wb").write(struct.pack("<Q", len(h)) + h + b"\0" * 16)
EOF
}

# --- a hand-written Keras 3 config in a safetensors file: edges and weights
cat >"$T/k3.json" <<'EOF'
{"class_name": "Functional", "config": {"layers": [
 {"class_name": "InputLayer", "name": "x", "config": {"batch_shape": [null, 2], "name": "x"}, "inbound_nodes": []},
 {"class_name": "Dense", "name": "d", "config": {"name": "d", "units": 2},
  "inbound_nodes": [{"args": [{"class_name": "__keras_tensor__", "config": {"keras_history": ["x", 0, 0]}}],
                     "kwargs": {}}]}],
 "input_layers": ["x", 0, 0], "output_layers": ["d", 0, 0]}}
EOF
st_with_config "$T/k3.safetensors" "$T/k3.json"
expect_rc 0 "$NPUC_BIN" info --graph "$T/k3.safetensors"
must_match "$T/out" '^  Gemm d \(Dense\) <- x -> d \[config, certain: model_config\]$'
must_match "$T/out" '^      kernel +d/kernel$'
must_match "$T/out" '^  d <- d, 0 consumers, model output \[config, certain'
expect_rc 0 "$NPUC_BIN" info --json "$T/k3.safetensors"
"$PY" - "$T/out" <<'EOF' || fail "info --json graph of k3"
import json, sys
g = json.load(open(sys.argv[1]))["graph"]
nodes = {n["name"]: n for n in g["nodes"]}
assert nodes["d"]["inputs"] == ["x"] and nodes["d"]["op"] == "Gemm", nodes
assert nodes["d"]["weights"] == [{"tensor": "d/kernel", "role": "kernel"}], nodes["d"]
assert nodes["d"]["attributes"]["units"] == "2"
vals = {v["name"]: v for v in g["values"]}
assert vals["x"]["shape"] == [None, 2] and vals["x"]["is_input"] and vals["d"]["is_output"]
EOF

# --- names and order: samples/cnn_bn.safetensors (nn.Sequential features.N + classifier)
expect_rc 0 "$NPUC_BIN" info --json "$NPUC_SRC/samples/cnn_bn.safetensors"
"$PY" - "$T/out" <<'EOF' || fail "info --json graph of cnn_bn"
import json, sys
g = json.load(open(sys.argv[1]))["graph"]
nodes = {n["name"]: n for n in g["nodes"]}
# every tensor hangs on the module its name gives
doc = json.load(open(sys.argv[1]))
for t in doc["tensors"]:
    mod = t["name"].rsplit(".", 1)[0]
    assert any(w["tensor"] == t["name"] for w in nodes[mod]["weights"]), (t["name"], mod)
assert nodes["features.1"]["op"] == "BatchNormalization" and nodes["features.1"]["inputs"] == ["features.0:0"]
assert all(n["evidence"] == "name" for n in g["nodes"])
roles = {w["tensor"]: w["role"] for n in g["nodes"] for w in n["weights"]}
assert roles["features.1.weight"] == "gamma" and roles["features.1.running_var"] == "var", roles
EOF

# --- the real Keras 2 file: the graph is the model_config's, read with h5py + json
f="$SHARED/nsfwjs_mobilenet_v2.h5"
if [ -n "$SHARED" ] && [ -f "$f" ]; then
    expect_rc 0 "$NPUC_BIN" info --json "$f"
    "$PY" - "$f" "$T/out" <<'EOF' || fail "nsfwjs graph against its model_config"
import json, sys, h5py
h = h5py.File(sys.argv[1], "r")
mc = h.attrs["model_config"]
cfg = json.loads(mc.decode() if isinstance(mc, bytes) else mc)
g = json.load(open(sys.argv[2]))["graph"]
nodes = {n["name"]: n for n in g["nodes"]}
layers = cfg["config"]["layers"]
assert len(nodes) == len(layers), (len(nodes), len(layers))
for l in layers:
    want = [e[0] for e in (l["inbound_nodes"][0] if l["inbound_nodes"] else [])]
    assert nodes[l["name"]]["inputs"] == want, (l["name"], nodes[l["name"]]["inputs"], want)
    assert nodes[l["name"]]["source_op"] == l["class_name"]
# every weight of the file's layer groups hangs on that layer's node
root = h["model_weights"] if "model_weights" in h else h
for lname in root.attrs["layer_names"]:
    lname = lname.decode() if isinstance(lname, bytes) else lname
    for w in root[lname].attrs.get("weight_names", []):
        w = (w.decode() if isinstance(w, bytes) else w)
        assert any(x["tensor"].endswith(w.split(":")[0].split("/")[-1]) for x in nodes[lname]["weights"]), (lname, w)
assert [v["name"] for v in g["values"] if v["is_output"]] == [cfg["config"]["output_layers"][0][0]]
EOF
fi

# --- hostile configurations: one line, exit 2, bounded time
bad() { # NAME PATTERN  (config text in $T/NAME.json)
    st_with_config "$T/$1.safetensors" "$T/$1.json"
    expect_rc 2 timeout 60 "$NPUC_BIN" info --graph "$T/$1.safetensors"
    [ "$(wc -l <"$T/err")" -eq 1 ] || fail "$1: more than one line on stderr: $(cat "$T/err")"
    must_match "$T/err" "$1\.safetensors: model_config: .*$2"
    must_be_empty "$T/out"
    # --json still answers, with the reason
    expect_rc 0 "$NPUC_BIN" info --json "$T/$1.safetensors"
    "$PY" -c "import json,sys; d=json.load(open('$T/out')); assert d['graph'] is None and '$1' in d['graph_error']" ||
        fail "$1: info --json graph_error"
}
echo '{"class_name": "Functional", "config": {"layers": [], "layers": []}}' >"$T/dupkeys.json"
bad dupkeys "duplicate object key"
cat >"$T/cycle.json" <<'EOF'
{"class_name": "Functional", "config": {"layers": [
 {"class_name": "Dense", "name": "a", "config": {"name": "a"}, "inbound_nodes": [[["b", 0, 0, {}]]]},
 {"class_name": "Dense", "name": "b", "config": {"name": "b"}, "inbound_nodes": [[["a", 0, 0, {}]]]}]}}
EOF
bad cycle "is on a cycle"
cat >"$T/selfloop.json" <<'EOF'
{"class_name": "Functional", "config": {"layers": [
 {"class_name": "Dense", "name": "a", "config": {"name": "a"}, "inbound_nodes": [[["a", 0, 0, {}]]]}]}}
EOF
bad selfloop "layer 'a' consumes its own output"
"$PY" -c "print('{\"class_name\": \"Functional\", \"config\": {\"layers\": ' + '[' * 100000 + ']' * 100000 + '}}')" >"$T/depth.json"
bad depth "maximum parsing depth"
"$PY" - "$T/many.json" <<'EOF'
import json, sys
n = 70000
layers = [{"class_name": "InputLayer", "name": "l0", "inbound_nodes": []}]
layers += [{"class_name": "ReLU", "name": f"l{i}", "inbound_nodes": [[[f"l{i-1}", 0, 0, {}]]]} for i in range(1, n)]
json.dump({"class_name": "Functional", "config": {"layers": layers}}, open(sys.argv[1], "w"))
EOF
bad many "more than 65536 layers"

# without --graph, info itself is unchanged by a bad model_config
expect_rc 0 "$NPUC_BIN" info "$T/cycle.safetensors"
must_match "$T/out" 'd/kernel'
