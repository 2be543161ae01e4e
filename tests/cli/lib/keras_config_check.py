"""keras_config_check.py FILE - the Keras model_config of FILE (a Keras 2
.h5, a Keras 3 .keras archive, or a .safetensors file with a model_config
metadata entry) agrees with its weights.  Read with Python's json, zipfile
and h5py only, never npuc (tests/cli/prune_keras_config.sh):

  - widths: for every Conv1D/2D/3D, SeparableConv*D, Conv*DTranspose and
    Dense layer (nested models included) whose kernel is in the file,
    `filters` / `units` equal the kernel's output extent (Keras kernels:
    [..., in, filters], transposed [..., filters, in], separable pointwise
    [1, 1, in, filters], Dense [in, units]);
  - biases: such a layer with a bias tensor does not say use_bias false;
  - topology: every layer an inbound node or output_layers names is a layer
    of the configuration, and every BatchNormalization layer still listed
    has its statistics in the file (fold-bn removes both or neither).

Prints what was checked; exit 1 naming the first disagreement, 3 when the
file has no model_config."""
import io
import json
import struct
import sys
import zipfile

import h5py

# Keras 3 archives store a layer's variables as layers/<name>/vars/<i>, in
# the order the layer creates them.
K3_VARS = {
    "SeparableConv1D": ["depthwise_kernel", "pointwise_kernel", "bias"],
    "SeparableConv2D": ["depthwise_kernel", "pointwise_kernel", "bias"],
    "DepthwiseConv1D": ["depthwise_kernel", "bias"],
    "DepthwiseConv2D": ["depthwise_kernel", "bias"],
}


def walk_layers(cfg):
    """Every plain layer, nested models' layers included, and every model
    scope (its layer list and its config)."""
    c = cfg.get("config", cfg)
    ls = c.get("layers") if isinstance(c, dict) else None
    if ls is None and isinstance(c, list):
        ls = c
    yield ("scope", cfg, ls or [])
    for l in ls or []:
        inner = l.get("config", {})
        if isinstance(inner, dict) and isinstance(inner.get("layers"), list):
            yield from walk_layers(l)
        else:
            yield ("layer", l, None)


def refs(v, out):
    """Layer names referenced below v (Keras 2 [name, node, tensor, ...]
    entries and Keras 3 keras_history)."""
    if isinstance(v, list):
        if len(v) >= 3 and isinstance(v[0], str) and isinstance(v[1], int) and isinstance(v[2], int):
            out.append(v[0])
            return
        for e in v:
            refs(e, out)
    elif isinstance(v, dict):
        h = v.get("config", {}).get("keras_history") if v.get("class_name") == "__keras_tensor__" else None
        if isinstance(h, list) and h and isinstance(h[0], str):
            out.append(h[0])
            return
        for e in v.values():
            refs(e, out)


def load(path):
    """(config dict or None, {layer: {leaf: shape}})."""
    weights = {}

    def add(layer, leaf, shape):
        weights.setdefault(layer, {})[leaf] = tuple(shape)

    if path.endswith(".safetensors"):
        with open(path, "rb") as f:
            n = struct.unpack("<Q", f.read(8))[0]
            head = json.loads(f.read(n))
        raw = head.get("__metadata__", {}).get("model_config")
        for k, v in head.items():
            if k != "__metadata__" and "/" in k:
                parts = k.split("/")
                add(parts[-2], parts[-1].split(":")[0], v["shape"])
        return (json.loads(raw) if raw else None), weights
    if path.endswith(".keras"):
        z = zipfile.ZipFile(path)
        names = z.namelist()
        cfg = json.loads(z.read("config.json")) if "config.json" in names else None
        classes = {l.get("config", {}).get("name") or l.get("name"): l.get("class_name")
                   for kind, l, _ in (walk_layers(cfg) if cfg else []) if kind == "layer"}
        with h5py.File(io.BytesIO(z.read("model.weights.h5")), "r") as f:
            def visit(p, o):
                parts = p.split("/")
                if isinstance(o, h5py.Dataset) and len(parts) >= 3 and parts[-2] == "vars":
                    layer, i = parts[-3], int(parts[-1])
                    order = K3_VARS.get(classes.get(layer), ["kernel", "bias"])
                    add(layer, order[i] if i < len(order) else str(i), o.shape)
            f.visititems(visit)
        return cfg, weights
    with h5py.File(path, "r") as f:
        raw = f.attrs.get("model_config")
        def visit(p, o):
            parts = p.split("/")
            if isinstance(o, h5py.Dataset) and len(parts) >= 2:
                add(parts[-2], parts[-1].split(":")[0], o.shape)
        f.visititems(visit)
    if raw is None:
        return None, weights
    return json.loads(raw.decode() if isinstance(raw, bytes) else raw), weights


def main(path):
    cfg, weights = load(path)
    if cfg is None:
        print(f"{path}: no model_config")
        sys.exit(3)
    checked = bns = 0
    names = set()
    scopes = []
    for kind, l, ls in walk_layers(cfg):
        if kind == "scope":
            scopes.append((l, ls))
            for x in ls:
                names.add(x.get("config", {}).get("name") or x.get("name"))
            continue
        cls, c = l.get("class_name"), l.get("config", {})
        name = c.get("name") or l.get("name")
        w = weights.get(name, {})
        if cls == "BatchNormalization":
            if "moving_mean" not in w and not (path.endswith(".keras") and w):
                print(f"{path}: BatchNormalization layer '{name}' is listed, but the file has no statistics for it")
                sys.exit(1)
            bns += 1
            continue
        if cls == "Dense":
            field, leaf, back = "units", "kernel", 1
        elif cls in ("Conv1D", "Conv2D", "Conv3D"):
            field, leaf, back = "filters", "kernel", 1
        elif cls in ("Conv1DTranspose", "Conv2DTranspose", "Conv3DTranspose"):
            field, leaf, back = "filters", "kernel", 2
        elif cls in ("SeparableConv1D", "SeparableConv2D"):
            field, leaf, back = "filters", "pointwise_kernel", 1
        else:
            continue
        if leaf not in w:
            continue
        got = w[leaf][len(w[leaf]) - back]
        if c.get(field) != got:
            print(f"{path}: layer '{name}' ({cls}) states {field} {c.get(field)}, its {leaf} {w[leaf]} has {got}")
            sys.exit(1)
        if "bias" in w and c.get("use_bias") is False:
            print(f"{path}: layer '{name}' ({cls}) says use_bias false, but the file has its bias {w['bias']}")
            sys.exit(1)
        checked += 1
    for model, ls in scopes:
        found = []
        for l in ls:
            refs(l.get("inbound_nodes", []), found)
        c = model.get("config", {})
        if isinstance(c, dict):
            refs(c.get("output_layers", []), found)
        for r in found:
            if r not in names:
                print(f"{path}: model_config refers to layer '{r}', which it does not list")
                sys.exit(1)
    print(f"{path}: {checked} layers' filters/units agree with their kernels; "
          f"{bns} BatchNorm layers listed, each with its statistics; every reference names a listed layer")
    if checked == 0:
        sys.exit(1)


if __name__ == "__main__":
    main(sys.argv[1])
