#!/usr/bin/env python3
"""Issue 31 item 6: one tensor, one channel count in fold-bn and structured prune.

    bnfold_channels.py make OUT.safetensors
        A Paddle DB-head-like file: conv2d_0.w_0 [24,96,3,3], batch_norm_0,
        conv2d_transpose_0.w_0 [24,24,2,2] + b_0, conv2d_transpose_1.w_0
        [24,1,2,2] (no bias), then batch_norm_1 (24 channels).  The file states
        no groups; Paddle's conv2d_transpose weight is [in, out/groups, kh, kw],
        so with groups 1 conv2d_transpose_1 makes 1 output channel and cannot
        feed a 24-channel BatchNorm.
    bnfold_channels.py plan PLAN.json [LAYOUT_OIHW]
        Checks fold-bn's --dry-run --json: every pair's channels are the
        producer's output channels by the convention above (axis 1 for
        conv2d_transpose, axis 0 for conv2d; LAYOUT_OIHW=1: conv2d_transpose_1
        stated as OIHW by --layout, so axis 0), with groups 1, and
        conv2d_transpose_1.w_0 is never paired unless stated as OIHW.
    bnfold_channels.py prune REPORT.json [LAYOUT_OIHW]
        Checks prune --json: every tensor's "channels" extra (or the "keeps
        all N channels" note) is the same count.
    bnfold_channels.py make-onnx OUT.onnx
        ConvTranspose 'up' with group = 2, W [4,3,2,2] (6 output channels:
        [in, out/group, kh, kw]), then a 6-channel BatchNormalization.
    bnfold_channels.py onnx PLAN.json PRUNE.json
        fold-bn's plan pairs up.weight with 6 channels and 2 groups, and prune's
        report states the same 6 channels for it (not pruned along axis 1).
    bnfold_channels.py same IN.safetensors OUT.safetensors TENSOR
        TENSOR is byte-identical in both files (no fold touched it).
Independent of npuc: the expected counts come from the shapes written here.
"""
import json
import re
import struct
import sys

import numpy as np

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from io_models import write  # noqa: E402

SHAPES = {"conv2d_0.w_0": (24, 96, 3, 3), "conv2d_transpose_0.w_0": (24, 24, 2, 2),
          "conv2d_transpose_1.w_0": (24, 1, 2, 2)}


def expected(name, oihw):
    s = SHAPES[name]
    if name.startswith("conv2d_transpose") and not (oihw and name == "conv2d_transpose_1.w_0"):
        return s[1]
    return s[0]


def make(path):
    rng = np.random.default_rng(31)

    def f(*s):
        return rng.standard_normal(s).astype(np.float32)

    def bn(p, c):
        return [(p + ".w_0", rng.uniform(0.5, 1.5, c).astype(np.float32)), (p + ".b_0", f(c)),
                (p + ".w_1", f(c)), (p + ".w_2", rng.uniform(0.5, 2, c).astype(np.float32))]

    t = [("conv2d_0.w_0", f(*SHAPES["conv2d_0.w_0"]))] + bn("batch_norm_0", 24)
    t += [("conv2d_transpose_0.w_0", f(*SHAPES["conv2d_transpose_0.w_0"])), ("conv2d_transpose_0.b_0", f(24))]
    t += [("conv2d_transpose_1.w_0", f(*SHAPES["conv2d_transpose_1.w_0"]))] + bn("batch_norm_1", 24)
    write(path, t)


def plan(path, oihw):
    d = json.load(open(path))
    pairs = d["pairs"]
    if not pairs:
        sys.exit("no pair in the plan")
    for p in pairs:
        e = expected(p["conv"], oihw)
        if p["channels"] != e or p.get("groups", 1) != 1:
            sys.exit(f"fold-bn pairs {p['conv']} with {p['channels']} channels (groups {p.get('groups')}); "
                     f"the file's reading is {e} channels, groups 1")
    convs = [p["conv"] for p in pairs]
    if ("conv2d_transpose_1.w_0" in convs) != bool(oihw):
        sys.exit(f"conv2d_transpose_1.w_0 paired: {'conv2d_transpose_1.w_0' in convs}, expected {bool(oihw)}")


def prune(path, oihw):
    d = json.load(open(path))
    seen = 0
    for t in d["tensors"]:
        if t["name"] not in SHAPES:
            continue
        got = t.get("extra", {}).get("channels")
        if got is None:
            m = re.search(r"keeps all (\d+) channels", t.get("note") or "")
            got = int(m.group(1)) if m else None
        if got is None:
            sys.exit(f"prune states no channel count for {t['name']} (note: {t.get('note')!r})")
        if got != expected(t["name"], oihw):
            sys.exit(f"prune reads {t['name']} as {got} channels, expected {expected(t['name'], oihw)}")
        seen += 1
    if seen != len(SHAPES):
        sys.exit(f"prune report covers {seen} of {len(SHAPES)} weights")


def make_onnx(path):
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(5)
    inits = [numpy_helper.from_array(rng.standard_normal((4, 3, 2, 2)).astype(np.float32), "up.weight")]
    for n, v in [("bn.scale", rng.uniform(.5, 1.5, 6)), ("bn.bias", rng.standard_normal(6)),
                 ("bn.mean", rng.standard_normal(6)), ("bn.var", rng.uniform(.5, 2, 6))]:
        inits.append(numpy_helper.from_array(v.astype(np.float32), n))
    nodes = [helper.make_node("ConvTranspose", ["x", "up.weight"], ["y"], group=2, strides=[2, 2], name="up"),
             helper.make_node("BatchNormalization", ["y", "bn.scale", "bn.bias", "bn.mean", "bn.var"], ["z"],
                              name="bn")]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 5, 5])],
                          [helper.make_tensor_value_info("z", TensorProto.FLOAT, [1, 6, 10, 10])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    onnx.save(m, path)


def check_onnx(plan_path, prune_path):
    out_ch = 3 * 2  # W [in, out/group, ..] with group 2
    pairs = json.load(open(plan_path))["pairs"]
    if len(pairs) != 1 or pairs[0]["conv"] != "up.weight" or pairs[0]["channels"] != out_ch or pairs[0]["groups"] != 2:
        sys.exit(f"fold-bn plan: {pairs}, expected up.weight with {out_ch} channels, 2 groups")
    for t in json.load(open(prune_path))["tensors"]:
        if t["name"] == "up.weight":
            got = t.get("extra", {}).get("channels")
            if got is None:
                m = re.search(r"its (\d+) channels", t.get("note") or "")
                got = int(m.group(1)) if m else None
            if got != out_ch or t["action"] != "kept":
                sys.exit(f"prune reads up.weight as {got} channels ({t['action']}: {t.get('note')!r}), "
                         f"expected {out_ch}, kept")
            return
    sys.exit("prune report has no up.weight")


def read_raw(path, name):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        h = json.loads(f.read(n))
        a, b = h[name]["data_offsets"]
        f.seek(8 + n + a)
        return h[name]["shape"], f.read(b - a)


def main():
    k = sys.argv[1]
    if k == "make":
        make(sys.argv[2])
    elif k == "plan":
        plan(sys.argv[2], len(sys.argv) > 3 and sys.argv[3] == "1")
    elif k == "prune":
        prune(sys.argv[2], len(sys.argv) > 3 and sys.argv[3] == "1")
    elif k == "make-onnx":
        make_onnx(sys.argv[2])
    elif k == "onnx":
        check_onnx(sys.argv[2], sys.argv[3])
    elif k == "same":
        if read_raw(sys.argv[2], sys.argv[4]) != read_raw(sys.argv[3], sys.argv[4]):
            sys.exit(f"{sys.argv[4]} changed")
    else:
        sys.exit(f"unknown command {k}")


if __name__ == "__main__":
    main()
