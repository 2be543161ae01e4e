#!/usr/bin/env python3
"""int8_channel_check.py ORIG FAKEQ AXIS NAME...: the --fake-quant output
FAKEQ holds, for each NAME, NumPy's symmetric int8 per-channel quantization of
ORIG's tensor along AXIS (scale max|w| / 127 over the other axes, codes
rounded half to even and clipped to [-127, 127]), within 1e-6 of the largest
magnitude.  F32 safetensors only; read with npuc_test.py's reader."""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from npuc_test import read_st  # noqa: E402


def tensors(path):
    return {n: np.frombuffer(b, "<f4").reshape(s) for n, d, s, b in read_st(path)[1]}


def main(argv):
    a, b, axis = tensors(argv[1]), tensors(argv[2]), int(argv[3])
    for name in argv[4:]:
        w = a[name]
        other = tuple(i for i in range(w.ndim) if i != axis)
        s = (np.abs(w).max(axis=other, keepdims=True) / np.float32(127)).astype(np.float32)
        y = (np.clip(np.round(w / s), -127, 127) * s).astype(np.float32)
        err = np.abs(y - b[name]).max() / np.abs(w).max()
        assert err < 1e-6, (name, err)
    print(f"int8 per channel along axis {axis}: {len(argv) - 4} tensors equal to NumPy")


if __name__ == "__main__":
    main(sys.argv)
