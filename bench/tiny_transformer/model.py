"""The tiny char-level (byte-level) decoder-only transformer of bench/tiny_transformer.

Pre-LayerNorm GPT: token and position embeddings, N blocks of causal
self-attention (one fused qkv Linear) and a GELU MLP, a final LayerNorm and an
untied Linear LM head over the 256 byte values.  Every matrix that multiplies
activations is an nn.Linear, so samples/calib/dump_calib.py's hooks see it;
the embeddings are lookups (no calibration data).
"""
import json
import math
import os
import struct
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "samples", "calib"))
from dump_calib import write_safetensors  # noqa: E402

CONFIG = {"vocab": 256, "d_model": 128, "heads": 4, "layers": 4, "mlp": 512, "context": 128}


class Attention(nn.Module):
    def __init__(self, d, h):
        super().__init__()
        self.h = h
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)

    def forward(self, x):
        B, T, D = x.shape
        q, k, v = self.qkv(x).split(D, dim=2)
        q, k, v = (t.view(B, T, self.h, D // self.h).transpose(1, 2) for t in (q, k, v))
        a = (q @ k.transpose(-2, -1)) / math.sqrt(D // self.h)
        mask = torch.ones(T, T, dtype=torch.bool, device=x.device).triu(1)
        a = a.masked_fill(mask, float("-inf")).softmax(-1)
        return self.proj((a @ v).transpose(1, 2).reshape(B, T, D))


class MLP(nn.Module):
    def __init__(self, d, m):
        super().__init__()
        self.fc1 = nn.Linear(d, m)
        self.fc2 = nn.Linear(m, d)

    def forward(self, x):
        return self.fc2(F.gelu(self.fc1(x)))


class Block(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.ln1 = nn.LayerNorm(c["d_model"])
        self.attn = Attention(c["d_model"], c["heads"])
        self.ln2 = nn.LayerNorm(c["d_model"])
        self.mlp = MLP(c["d_model"], c["mlp"])

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class TinyGPT(nn.Module):
    def __init__(self, c=CONFIG):
        super().__init__()
        self.tok = nn.Embedding(c["vocab"], c["d_model"])
        self.pos = nn.Embedding(c["context"], c["d_model"])
        self.blocks = nn.ModuleList(Block(c) for _ in range(c["layers"]))
        self.lnf = nn.LayerNorm(c["d_model"])
        self.head = nn.Linear(c["d_model"], c["vocab"], bias=False)

    def forward(self, idx):
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device))
        for b in self.blocks:
            x = b(x)
        return self.head(self.lnf(x))


def read_safetensors(path):
    """name -> float32 numpy array (F32, F16, BF16 entries)."""
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        hdr = json.loads(f.read(n))
        base = 8 + n
        out = {}
        for k, v in hdr.items():
            if k == "__metadata__":
                continue
            f.seek(base + v["data_offsets"][0])
            b = f.read(v["data_offsets"][1] - v["data_offsets"][0])
            if v["dtype"] == "F32":
                a = np.frombuffer(b, "<f4")
            elif v["dtype"] == "F16":
                a = np.frombuffer(b, "<f2").astype(np.float32)
            elif v["dtype"] == "BF16":
                a = (np.frombuffer(b, "<u2").astype(np.uint32) << 16).view(np.float32)
            else:
                continue
            out[k] = a.reshape(v["shape"]).astype(np.float32)
    return out


def save(model, path):
    write_safetensors(path, [(k, v.detach().float().numpy()) for k, v in model.state_dict().items()])


def load(path):
    m = TinyGPT()
    sd = read_safetensors(path)
    m.load_state_dict({k: torch.from_numpy(sd[k].copy()) for k in m.state_dict()})
    return m.eval()
