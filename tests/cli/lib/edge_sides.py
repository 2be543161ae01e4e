#!/usr/bin/env python3
"""Models for tests/cli/edge_sides.sh (issue 31 item 4), written with NumPy,
h5py and struct packing (independent of npuc), and a reader of which
tensors an npuc safetensors artifact holds as 8-bit codes.

    edge_sides.py make DIR     writes the models below into DIR
    edge_sides.py eight FILE   prints the names whose codes are 8-bit
                               (I8/U8 of the original rank), sorted; every
                               other quantized tensor must be packed 4-bit
"""
import json
import os
import struct
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from io_models import write  # noqa: E402

rng = np.random.default_rng(31)


def f32(*s):
    return rng.standard_normal(s).astype(np.float32)


def char_lm(d, emb="tok"):
    """A character LM as the issue's: embedding `emb` [V, d], two blocks, head [V, d]."""
    v, h = 96, 64
    t = [(f"{emb}.weight", f32(v, h))]
    for b in range(2):
        t += [(f"blocks.{b}.attn.weight", f32(h, h)), (f"blocks.{b}.attn.bias", f32(h)),
              (f"blocks.{b}.mlp.weight", f32(h, h)), (f"blocks.{b}.norm.weight", f32(h))]
    t += [("head.weight", f32(v, h))]
    return t


def detector():
    """A Paddle detector: every conv conv2d_N (+ .b_0), then the output head
    conv2d_transpose_0 -> conv2d_transpose_1 ([in, out, kh, kw])."""
    t = []
    for i in range(6):
        t += [(f"conv2d_{i}.w_0", f32(16, 3 if i == 0 else 16, 3, 3)), (f"conv2d_{i}.b_0", f32(16))]
    t += [("conv2d_transpose_0.w_0", f32(16, 8, 2, 2)), ("conv2d_transpose_0.b_0", f32(8)),
          ("conv2d_transpose_1.w_0", f32(8, 1, 2, 2)), ("conv2d_transpose_1.b_0", f32(1))]
    return t


def keras_layer(name, cls, inbound, **cfg):
    return {"class_name": cls, "name": name, "config": dict(name=name, **cfg),
            "inbound_nodes": [[[i, 0, 0, {}] for i in inbound]] if inbound else []}


def keras_h5(path):
    """A Keras 2 .h5 with a model_config whose names tell nothing and whose
    layer_names put the output Dense `dense_1` before the rest: the config's
    topology says ca reads the input and dense_1 makes the output."""
    import h5py
    layers = [
        keras_layer("inp", "InputLayer", [], batch_input_shape=[None, 8, 8, 3]),
        keras_layer("ca", "Conv2D", ["inp"], filters=8, kernel_size=[3, 3], use_bias=True),
        keras_layer("cb", "Conv2D", ["ca"], filters=8, kernel_size=[3, 3], use_bias=True),
        keras_layer("gap", "GlobalAveragePooling2D", ["cb"]),
        keras_layer("dense", "Dense", ["gap"], units=16),
        keras_layer("dense_1", "Dense", ["dense"], units=4),
    ]
    cfg = {"class_name": "Functional", "config": {"name": "m", "layers": layers, "input_layers": [["inp", 0, 0]],
                                                  "output_layers": [["dense_1", 0, 0]]}}
    w = {"ca": {"kernel:0": f32(3, 3, 3, 8), "bias:0": f32(8)}, "cb": {"kernel:0": f32(3, 3, 8, 8), "bias:0": f32(8)},
         "dense": {"kernel:0": f32(8, 16), "bias:0": f32(16)}, "dense_1": {"kernel:0": f32(16, 4), "bias:0": f32(4)}}
    order = ["inp", "dense_1", "cb", "gap", "ca", "dense"]
    with h5py.File(path, "w") as f:
        f.attrs["layer_names"] = np.array([n.encode() for n in order])
        f.attrs["backend"] = b"tensorflow"
        f.attrs["keras_version"] = b"2.11.0"
        f.attrs["model_config"] = json.dumps(cfg).encode()
        for n in order:
            g = f.create_group(n)
            ws = w.get(n, {})
            g.attrs["weight_names"] = np.array([f"{n}/{k}".encode() for k in ws], dtype="S")
            for k, a in ws.items():
                g.create_dataset(f"{n}/{k}", data=a)


def checkpoint(d, name, shards, index=True):
    """A Hugging Face checkpoint folder: shards (lists of (name, array)), the
    index mapping each name to its shard (when index)."""
    os.makedirs(d, exist_ok=True)
    wm, m = {}, len(shards)
    for k, ts in enumerate(shards):
        fn = f"{name}-{k + 1:05d}-of-{m:05d}.safetensors"
        write(os.path.join(d, fn), ts, {"format": "pt"})
        wm.update({n: fn for n, _ in ts})
    if index:
        with open(os.path.join(d, f"{name}.safetensors.index.json"), "w") as f:
            json.dump({"metadata": {"total_size": 0}, "weight_map": wm}, f)


def make(d):
    for emb in ("tok", "tok_emb", "emb", "embedding", "token_embedding", "wte", "shared"):
        write(f"{d}/lm_{emb}.safetensors", char_lm(d, emb), {"format": "pt"})
    # GPT-2 style, head tied to wte (no head tensor): the embedding settles both sides
    gpt = [("wte.weight", f32(100, 32)), ("h.0.attn.c_attn.weight", f32(32, 96)), ("h.0.mlp.c_proj.weight", f32(32, 32))]
    write(f"{d}/gpt_tied.safetensors", gpt, {"format": "pt"})
    # names that only contain a head word: conv2d_N, a block's output, a Keras conv2d_transpose
    sub = [("stem_in.weight", f32(8, 3, 3, 3)), ("blocks.0.output.weight", f32(8, 8)), ("conv2d_1.w_0", f32(8, 8, 3, 3)),
           ("headless.weight", f32(8, 8)), ("classifier_x.weight", f32(4, 8))]
    write(f"{d}/components.safetensors", sub, {"format": "pt"})
    det = detector()
    write(f"{d}/det_graph_order.safetensors", det, {"format": "pt"})
    write(f"{d}/det_sorted.safetensors", sorted(det, key=lambda x: x[0]), {"format": "pt"})
    keras_h5(f"{d}/keras_cfg.h5")
    # layers named by nothing, in graph order (not alphabetical) over two shards
    plain = [(f"{n}.weight", f32(32, 32)) for n in ("in_proj", "body_a", "body_b", "body_c", "body_d", "final")]
    checkpoint(f"{d}/ck_plain", "model", [plain[:3], plain[3:]])
    # the char LM over two shards: the head only in the second
    lm = char_lm(d, "tok")
    checkpoint(f"{d}/ck_lm", "model", [lm[:5], lm[5:]])
    checkpoint(f"{d}/ck_lm_noindex", "model", [lm[:5], lm[5:]], index=False)
    checkpoint(f"{d}/ck_plain_noindex", "model", [plain[:3], plain[3:]], index=False)


def eight(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        h = json.loads(f.read(n))
    meta = json.loads(h["__metadata__"]["npuc"])["tensors"]
    out = []
    for name, e in meta.items():
        if name not in h or not isinstance(e, dict) or "shape" not in e:
            continue  # a checkpoint shard lists every tensor, holds its own
        s = h[name]
        if s["dtype"] in ("I8", "U8") and len(s["shape"]) == len(e["shape"]):
            out.append(name)  # unpacked: 8-bit codes
        else:
            assert s["dtype"] == "U8" and len(s["shape"]) == 1, (name, s)  # packed 4-bit
    print(" ".join(sorted(out)))


if __name__ == "__main__":
    {"make": make, "eight": eight}[sys.argv[1]](sys.argv[2])
