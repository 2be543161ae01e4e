#!/usr/bin/env python3
"""Generated files and independent checks for tests/cli/fold_bn_trust.sh
(issue 14: fold-bn applies only trustworthy pairs by default).  Files are
written with numpy/h5py and read back with npuc_test.py's readers, never
with npuc.

    bnfold_trust.py paddle OUT.safetensors
        A Paddle detector exported through ONNX, stored alphabetically:
        conv2d_0 -> batch_norm_0, conv2d_1 -> batch_norm_1, Add -> batch_norm_2,
        a biased head conv2d_2 (8 -> 8) and a transposed conv
        conv2d_transpose_0.w_0 [8,4,2,2] with bias .b_0 [1,4,1,1] ->
        batch_norm_3.
    bnfold_trust.py check-paddle PLAN.json MODE
        MODE default: nothing applied (batch_norm_2 after the Add included),
        every candidate listed as a guess; MODE accept: no pair uses a bias
        (batch_norm_3 goes to the transposed conv's weight), no "*.b_0.bias"
        would be created, every applied pair is marked a guess.
    bnfold_trust.py keras2 OUT.h5
        Keras 2 HDF5 (layer_names, weight_names, model_config with
        inbound_nodes): in -> c1 (Conv2D) -> bn1 -> relu -> c2 (Conv2D);
        add = Add(relu, c2) -> c2_bn (a BatchNorm after the Add, named as if
        it belonged to c2).
    bnfold_trust.py check-keras2 ORIG.h5 FOLDED
        c1 folded with bn1 (eps 1e-3 from model_config): W * gamma /
        sqrt(var + eps) along the last axis, bias beta - mean * s; c2 and
        the c2_bn tensors unchanged.
    bnfold_trust.py keras3 OUT.weights.h5
        Keras 3 layout (layers/<name>/vars/N, no names for the variables):
        conv2d (Conv2D 3 -> 8) -> batch_normalization, depthwise_conv2d
        ([3,3,8,1]) -> batch_normalization_1.
    bnfold_trust.py check-keras3 ORIG FOLDED
        Both BatchNorms folded (eps 1e-3): the conv along its last axis, the
        depthwise kernel along its input-channel axis (multiplier 1).
    bnfold_trust.py check-catalog PLAN.json CATALOG.json MODE
        MODE default: every applied pair is in the catalog and not a guess;
        every catalog pair not applied is listed as a skipped guess for that
        BatchNorm.  MODE accept: the applied set equals the catalog's.
        MODE certain: the applied set equals the catalog's and none is a guess.
"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bnfold_check import arrays, prefix, rel, write_st  # noqa: E402

import numpy as np  # noqa: E402

RTOL = 1e-6
rng = np.random.default_rng(14)


def f32(*s):
    return rng.standard_normal(s).astype(np.float32)


def bn_stats(c):
    return [f32(c) + 2, f32(c), f32(c), (np.abs(f32(c)) + 0.5).astype(np.float32)]


# ---------------------------------------------------------------- Paddle repro 2

def cmd_paddle(out):
    t = {"conv2d_0.w_0": f32(8, 3, 3, 3), "conv2d_1.w_0": f32(8, 8, 3, 3),
         "conv2d_2.w_0": f32(8, 8, 1, 1), "conv2d_2.b_0": f32(8),
         "conv2d_transpose_0.w_0": f32(8, 4, 2, 2), "conv2d_transpose_0.b_0": f32(1, 4, 1, 1)}
    for k, c in enumerate((8, 8, 8, 4)):
        g, b, m, v = bn_stats(c)
        t.update({f"batch_norm_{k}.w_0": g, f"batch_norm_{k}.b_0": b, f"batch_norm_{k}.w_1": m,
                  f"batch_norm_{k}.w_2": v})
    write_st(out, sorted(t.items()))
    return 0


def cmd_check_paddle(plan_path, mode):
    plan = json.load(open(plan_path))
    pairs = {p["bn"]: p for p in plan["pairs"]}
    bad = []
    for p in plan["pairs"]:
        if p["conv"].endswith(".b_0") or p["bias"].endswith(".b_0.bias"):
            bad.append(f"{p['bn']} paired with the bias '{p['conv']}' (bias '{p['bias']}')")
    if mode == "default":
        if plan["pairs"]:
            bad.append(f"{len(plan['pairs'])} guessed pairs applied without --accept-guesses")
        guessed = {s["bn"] for s in plan["skipped"] if s.get("guess")}
        if guessed != {"batch_norm_0", "batch_norm_1", "batch_norm_2", "batch_norm_3"}:
            bad.append(f"guesses listed: {sorted(guessed)}")
    else:
        # Accepted guesses: the file has no trace of the Add, so batch_norm_2 may be
        # aligned, but every applied pair must say it is a guess.
        if pairs.get("batch_norm_3", {}).get("conv") != "conv2d_transpose_0.w_0":
            bad.append(f"batch_norm_3 not paired with the transposed conv's weight: {pairs.get('batch_norm_3')}")
        bad += [f"{p['bn']} applied without the guess mark" for p in plan["pairs"] if not p["guess"]]
    for s in plan["skipped"]:
        if (s.get("conv") or "").endswith(".b_0"):
            bad.append(f"a bias offered as a candidate: {s}")
    if bad:
        print("\n".join(bad), file=sys.stderr)
        return 1
    print(f"paddle ({mode}): {len(plan['pairs'])} applied, no bias paired or created")
    return 0


# ---------------------------------------------------------------- Keras 2 with model_config

def keras_layer(name, cls, inbound, **cfg):
    cfg["name"] = name
    return {"class_name": cls, "name": name, "config": cfg,
            "inbound_nodes": [[[i, 0, 0, {}] for i in inbound]] if inbound else []}


def cmd_keras2(out):
    import h5py
    layers = [
        keras_layer("in", "InputLayer", [], batch_input_shape=[None, 8, 8, 3]),
        keras_layer("c1", "Conv2D", ["in"], filters=8, kernel_size=[3, 3], activation="linear", use_bias=False),
        keras_layer("bn1", "BatchNormalization", ["c1"], axis=-1, epsilon=0.001),
        keras_layer("relu", "Activation", ["bn1"], activation="relu"),
        keras_layer("c2", "Conv2D", ["relu"], filters=8, kernel_size=[1, 1], activation="linear", use_bias=False),
        keras_layer("add", "Add", ["relu", "c2"]),
        keras_layer("c2_bn", "BatchNormalization", ["add"], axis=-1, epsilon=0.001),
    ]
    cfg = {"class_name": "Functional", "config": {"name": "m", "layers": layers,
                                                  "input_layers": [["in", 0, 0]],
                                                  "output_layers": [["c2_bn", 0, 0]]}}
    weights = {"c1": {"kernel:0": f32(3, 3, 3, 8)}, "c2": {"kernel:0": f32(1, 1, 8, 8)}}
    for bn in ("bn1", "c2_bn"):
        weights[bn] = dict(zip(("gamma:0", "beta:0", "moving_mean:0", "moving_variance:0"), bn_stats(8)))
    with h5py.File(out, "w") as f:
        f.attrs["layer_names"] = np.array([l["name"].encode() for l in layers])
        f.attrs["backend"] = b"tensorflow"
        f.attrs["keras_version"] = b"2.11.0"
        f.attrs["model_config"] = json.dumps(cfg).encode()
        for l in layers:
            g = f.create_group(l["name"])
            w = weights.get(l["name"], {})
            g.attrs["weight_names"] = np.array([f"{l['name']}/{k}".encode() for k in w], dtype="S")
            for k, a in w.items():
                g.create_dataset(f"{l['name']}/{k}", data=a)
    return 0


def find(d, name):
    """The tensor called name, with or without a Keras ':0' suffix or a layer path prefix."""
    for k in d:
        s = k[:-2] if k.endswith(":0") else k
        if s == name or s.endswith("/" + name):
            return d[k]
    raise KeyError(name)


def has(d, name):
    try:
        find(d, name)
        return True
    except KeyError:
        return False


def fold_ref(w, g, b, m, v, eps, axis_shape):
    s = g.astype(np.float64) / np.sqrt(v.astype(np.float64) + eps)
    return w.astype(np.float64) * s.reshape(axis_shape), b.astype(np.float64) - m * s


def cmd_check_keras2(orig, folded):
    _, a, _ = arrays(orig)
    _, b, _ = arrays(folded)
    bad = []
    g, be, m, v = (find(a, f"bn1/{k}") for k in ("gamma", "beta", "moving_mean", "moving_variance"))
    ww, wb = fold_ref(find(a, "c1/kernel"), g, be, m, v, 1e-3, (1, 1, 1, -1))
    rw, rb = rel(find(b, "c1/kernel"), ww), rel(find(b, "c1/bias"), wb)
    if rw > RTOL or rb > RTOL:
        bad.append(f"c1: weight rel {rw:.3g}, bias rel {rb:.3g}")
    if has(b, "bn1/gamma"):
        bad.append("bn1 still in the folded file")
    for k in ("c2/kernel", "c2_bn/gamma", "c2_bn/moving_variance"):
        if not has(b, k) or not np.array_equal(find(a, k), find(b, k)):
            bad.append(f"'{k}' changed or missing: the BatchNorm after the Add must stay")
    if has(b, "c2/bias"):
        bad.append("a bias was created for c2")
    if bad:
        print("\n".join(bad), file=sys.stderr)
        return 1
    print(f"keras2: c1 <- bn1 equals numpy (rel {max(rw, rb):.2e}); c2_bn after the Add left alone")
    return 0


# ---------------------------------------------------------------- Keras 3 .weights.h5

def cmd_keras3(out):
    import h5py
    with h5py.File(out, "w") as f:
        root = f.create_group("layers")
        def layer(name, arrs):
            v = root.create_group(name).create_group("vars")
            for i, x in enumerate(arrs):
                v.create_dataset(str(i), data=x)
        layer("conv2d", [f32(3, 3, 3, 8)])
        layer("batch_normalization", bn_stats(8))
        layer("depthwise_conv2d", [f32(3, 3, 8, 1)])
        layer("batch_normalization_1", bn_stats(8))
        f.create_group("optimizer").create_group("vars")
    return 0


def cmd_check_keras3(orig, folded):
    _, a, _ = arrays(orig)
    _, b, _ = arrays(folded)
    bad, worst = [], 0.0
    for conv, bn, shape in (("conv2d", "batch_normalization", (1, 1, 1, -1)),
                            ("depthwise_conv2d", "batch_normalization_1", (1, 1, -1, 1))):
        st = [a[f"layers/{bn}/vars/{i}"] for i in range(4)]
        ww, wb = fold_ref(a[f"layers/{conv}/vars/0"], *st, 1e-3, shape)
        got_w = next((b[k] for k in b if k.startswith(f"layers/{conv}/") and b[k].ndim == 4), None)
        got_b = next((b[k] for k in b if k.startswith(f"layers/{conv}/") and b[k].ndim == 1), None)
        if got_w is None or got_b is None:
            bad.append(f"{conv}: folded kernel or bias missing ({sorted(b)})")
            continue
        rw, rb = rel(got_w, ww), rel(got_b, wb)
        worst = max(worst, rw, rb)
        if rw > RTOL or rb > RTOL:
            bad.append(f"{conv} <- {bn}: weight rel {rw:.3g}, bias rel {rb:.3g}")
        if any(k.startswith(f"layers/{bn}/") for k in b):
            bad.append(f"{bn} still in the folded file")
    if bad:
        print("\n".join(bad), file=sys.stderr)
        return 1
    print(f"keras3: both BatchNorms folded as numpy does (max rel {worst:.2e})")
    return 0


# ---------------------------------------------------------------- shared catalogs

def cmd_check_catalog(plan_path, catalog_path, mode):
    plan = json.load(open(plan_path))
    cat = json.load(open(catalog_path))
    want = {(p["conv"], prefix(p["mean"])) for p in cat["bn_pairs"] if p.get("conv")}
    got = {(p["conv"], p["bn"]) for p in plan["pairs"]}
    guessed_applied = [p for p in plan["pairs"] if p["guess"]]
    skipped_guess = {s["bn"] for s in plan["skipped"] if s.get("guess")}
    bad = []
    if mode == "default":
        for p in sorted(got - want):
            bad.append(f"applied pair {p} is not in the catalog")
        for p in guessed_applied:
            bad.append(f"guess applied without --accept-guesses: {p['conv']} -> {p['bn']}")
        for conv, bn in sorted(want - got):
            if bn not in skipped_guess:
                bad.append(f"catalog pair {conv} -> {bn} neither applied nor listed as a guess")
    else:
        if got != want:
            bad += [f"missing {p}" for p in sorted(want - got)[:10]] + [f"extra {p}" for p in sorted(got - want)[:10]]
        if mode == "certain" and guessed_applied:
            bad.append(f"{len(guessed_applied)} applied pairs are guesses")
    if bad:
        print("\n".join(bad[:20]), file=sys.stderr)
        return 1
    print(f"{os.path.basename(plan_path)} ({mode}): {len(got)} applied, {len(skipped_guess)} listed as guesses, "
          f"catalog {len(want)}")
    return 0


def main(argv):
    cmds = {"paddle": cmd_paddle, "check-paddle": cmd_check_paddle, "keras2": cmd_keras2,
            "check-keras2": cmd_check_keras2, "keras3": cmd_keras3, "check-keras3": cmd_check_keras3,
            "check-catalog": cmd_check_catalog}
    if len(argv) < 3 or argv[1] not in cmds:
        print(__doc__, file=sys.stderr)
        return 2
    return cmds[argv[1]](*argv[2:])


if __name__ == "__main__":
    sys.exit(main(sys.argv))
