"""keras_config_check.py FILE.h5 - the Keras model_config of an HDF5 file
agrees with its weights: for every Conv1D/2D/3D, SeparableConv*D,
Conv*DTranspose and Dense layer (nested models included) whose kernel is in
the file, `filters` / `units` equal the kernel's output extent (Keras
kernels: [..., in, filters], transposed [..., filters, in], separable
pointwise [1, 1, in, filters], Dense [in, units]).  Read with Python's json
and h5py only (tests/cli/prune_keras_config.sh).  Prints the layers checked;
exit 1 naming the first disagreement, 3 when the file has no model_config."""
import json
import sys

import h5py


def layers(cfg, depth=0):
    c = cfg.get("config", cfg)
    ls = c.get("layers") if isinstance(c, dict) else None
    if ls is None and isinstance(c, list):
        ls = c
    for l in ls or []:
        inner = l.get("config", {})
        if isinstance(inner, dict) and isinstance(inner.get("layers"), list):
            yield from layers(l, depth + 1)
        else:
            yield l


def main(path):
    with h5py.File(path, "r") as f:
        raw = f.attrs.get("model_config")
        if raw is None:
            print(f"{path}: no model_config")
            sys.exit(3)
        cfg = json.loads(raw.decode() if isinstance(raw, bytes) else raw)
        shapes = {}
        f.visititems(lambda n, o: shapes.__setitem__(n, o.shape) if isinstance(o, h5py.Dataset) else None)
    checked = 0
    for l in layers(cfg):
        cls, c = l.get("class_name"), l.get("config", {})
        name = c.get("name") or l.get("name")
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
        hits = [s for p, s in shapes.items()
                if p.split("/")[-1].split(":")[0] == leaf and name in p.split("/")[:-1]]
        if not hits:
            continue
        got = hits[0][len(hits[0]) - back]
        if c.get(field) != got:
            print(f"{path}: layer '{name}' ({cls}) states {field} {c.get(field)}, its {leaf} {hits[0]} has {got}")
            sys.exit(1)
        checked += 1
    print(f"{path}: {checked} layers' {'/'.join(['filters', 'units'])} agree with their kernels")
    if checked == 0:
        sys.exit(1)


if __name__ == "__main__":
    main(sys.argv[1])
