#!/usr/bin/env python3
"""Dump npuc calibration data (docs/calibration.md) with PyTorch forward hooks.

For every nn.Linear and nn.Conv2d of a module it accumulates, over the
batches you feed it, the sum of x x^T of the rows the layer multiplies (in
float64), their count and the mean of x^2 per input column, and writes

    <weight>.hessian        [K, K] F64
    <weight>.hessian_count  [1]    I64
    <weight>.input_sq       [K]    F32
    <weight>.input          [N, K] F32   (only with --inputs)

and, when you can give a loss (output_grads below; the budget allocator of
`npuc quantize --target-size` then predicts the loss increase itself):

    <weight>.output_grad_sq [O]    F32   mean over the same rows of the squared
                                         derivative of the loss, summed over the
                                         batch, with respect to each output channel

under the weight's state_dict name, as safetensors.  Convolution inputs are
unfolded in the weight's reduction order (in_channels * kh * kw).

    python3 dump_calib.py --demo calib.safetensors   # a small built-in model
Edit load_model() and batches() for your own network.
"""
import argparse
import json
import struct

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


def load_model():
    """Your model here (eval mode)."""
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.Flatten(),
                         nn.Linear(8 * 8 * 8, 16), nn.ReLU(), nn.Linear(16, 4)).eval()


def batches():
    """Your calibration batches here (a few hundred samples are typical)."""
    g = torch.Generator().manual_seed(1)
    for _ in range(4):
        yield torch.randn(16, 3, 8, 8, generator=g)


def rows_of(layer, x):
    """The [N, K] rows a layer multiplies, in its weight's reduction order."""
    if isinstance(layer, nn.Conv2d):
        p = F.unfold(x, layer.kernel_size, dilation=layer.dilation, padding=layer.padding, stride=layer.stride)
        return p.transpose(1, 2).reshape(-1, p.shape[1])  # [B*L, C*kh*kw]
    return x.reshape(-1, x.shape[-1])


def collect(model, data, keep_inputs):
    names = {id(m): n for n, m in model.named_modules()}
    stats, hooks = {}, []

    def hook(layer, inp, _out):
        r = rows_of(layer, inp[0].detach()).double()
        key = names[id(layer)] + ".weight" if names[id(layer)] else "weight"
        s = stats.setdefault(key, {"h": 0, "n": 0, "sq": 0, "x": []})
        s["h"] = s["h"] + r.T @ r
        s["n"] += r.shape[0]
        s["sq"] = s["sq"] + (r * r).sum(0)
        if keep_inputs:
            s["x"].append(r.float())

    for m in model.modules():
        if isinstance(m, (nn.Linear, nn.Conv2d)):
            hooks.append(m.register_forward_hook(hook))
    with torch.no_grad():
        for b in data:
            model(b)
    for h in hooks:
        h.remove()
    out = []
    for k, s in stats.items():
        h = s["h"].numpy()
        out.append((k + ".hessian", (h + h.T) / 2))
        out.append((k + ".hessian_count", np.array([s["n"]], dtype=np.int64)))
        out.append((k + ".input_sq", (s["sq"] / s["n"]).float().numpy()))
        if keep_inputs:
            out.append((k + ".input", torch.cat(s["x"]).numpy()))
    return out


def output_grads(model, data, loss_fn):
    """<weight>.output_grad_sq for every nn.Linear and nn.Conv2d: loss_fn(model,
    batch) must return the loss SUMMED over the batch's rows (reduction="sum"),
    so that each row's derivative is its own.  Feed the batches collect() saw."""
    names = {id(m): n for n, m in model.named_modules()}
    acc, hooks = {}, []

    def hook(layer, _gin, gout):
        g = gout[0].detach().double()
        g = g.movedim(1, -1) if isinstance(layer, nn.Conv2d) else g  # channels last: one row per position
        g = g.reshape(-1, g.shape[-1])
        key = names[id(layer)] + ".weight" if names[id(layer)] else "weight"
        s = acc.setdefault(key, {"sq": 0, "n": 0})
        s["sq"] = s["sq"] + (g * g).sum(0)
        s["n"] += g.shape[0]

    for m in model.modules():
        if isinstance(m, (nn.Linear, nn.Conv2d)):
            hooks.append(m.register_full_backward_hook(hook))
    for b in data:
        model.zero_grad()
        loss_fn(model, b).backward()
    for h in hooks:
        h.remove()
    return [(k + ".output_grad_sq", (s["sq"] / s["n"]).float().numpy()) for k, s in acc.items()]


def write_safetensors(path, tensors):
    hdr, off, blobs = {}, 0, []
    for name, a in tensors:
        a = np.ascontiguousarray(a)
        dt = {"float32": "F32", "float64": "F64", "int64": "I64"}[str(a.dtype)]
        b = a.astype(a.dtype.newbyteorder("<")).tobytes()
        hdr[name] = {"dtype": dt, "shape": list(a.shape), "data_offsets": [off, off + len(b)]}
        off += len(b)
        blobs.append(b)
    h = json.dumps(hdr).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", help="calibration file to write (.safetensors)")
    ap.add_argument("--inputs", action="store_true", help="also write the raw rows as <weight>.input")
    ap.add_argument("--demo", action="store_true", help="also write the built-in model's weights to OUT.model.safetensors")
    a = ap.parse_args()
    model = load_model()
    write_safetensors(a.out, collect(model, batches(), a.inputs))
    if a.demo:
        write_safetensors(a.out + ".model.safetensors",
                          [(k, v.detach().numpy()) for k, v in model.state_dict().items()])


if __name__ == "__main__":
    main()
