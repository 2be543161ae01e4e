#!/usr/bin/env python3
"""Independent channel-consistency check of a weight file (tests/cli/prune_consistency.sh).

    consistency_check.py FILE [CATALOG.json]

Reads FILE with npuc_test.py's readers (standard library for safetensors, h5py
for HDF5) and checks, from names and the catalog alone (never from npuc):
  - every BatchNorm's tensors have one length;
  - every conv/linear weight's own bias (X.weight/X.bias, X.w_0/X.b_0,
    L/kernel|filters|pointwise_filter / L/bias) has one value per output channel;
  - nn.Sequential numbering (P.0, P.1, ...; a file of top-level numbers is an
    nn.Sequential itself): the BatchNorm after a conv/linear has its output
    channels, and the next weighted child reads them (a depthwise conv passes
    them through, a linear after a conv reads a multiple);
  - CATALOG's bn_pairs: the conv's output channels equal each BatchNorm tensor's
    length (layouts from the catalog: TF -> HWIO, else OIHW);
  - a Keras model_config (HDF5): prune_check.py keras_consistent.
Exit 1 with one line per inconsistency naming both tensors.
"""
import json
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from npuc_test import read_any  # noqa: E402

BN_LEAVES = {"running_mean", "running_var", "moving_mean", "moving_variance", "gamma", "beta"}


def main(argv):
    path = argv[0]
    cat = json.load(open(argv[1])) if len(argv) > 1 else None
    meta, ts = read_any(path)
    shape = {n: list(s) for n, dt, s, d in ts}
    bad = []
    tf = cat is not None and cat.get("layout", "").startswith("TF")
    keras = any(re.search(r"/(kernel|depthwise_kernel|gamma|moving_mean)(:0)?$", n) for n in shape)

    def out_ch(name):
        s = shape[name]
        if tf or keras:
            return s[-2] * s[-1] if re.search(r"depthwise", name) else s[-1]
        return s[0]

    def in_ch(name):
        s = shape[name]
        if tf or keras:
            return s[-2] if len(s) >= 3 else s[0]
        return s[1]

    # BatchNorm tensors among themselves (PyTorch: X.weight/X.bias beside X.running_mean)
    groups = {}
    for n in shape:
        m = re.match(r"(.*)[./](running_mean|running_var|moving_mean|moving_variance|gamma|beta)(:0)?$", n)
        if m:
            groups.setdefault(m.group(1), []).append(n)
    for p, ns in list(groups.items()):
        if any(x.endswith("running_mean") for x in ns):
            ns += [p + ".weight", p + ".bias"]
        if cat:
            pass
        ns = [x for x in ns if x in shape]
        for x in ns:
            if shape[x] != shape[ns[0]]:
                bad.append(f"BatchNorm '{p}': '{ns[0]}' {shape[ns[0]]} vs '{x}' {shape[x]}")
    if cat:
        for bp in cat.get("bn_pairs", []):
            ns = [bp[k] for k in ("gamma", "beta", "mean", "var") if bp.get(k) in shape]
            for x in ns:
                if shape[x] != shape[ns[0]]:
                    bad.append(f"BatchNorm of '{bp['conv']}': '{ns[0]}' {shape[ns[0]]} vs '{x}' {shape[x]}")
            c = out_ch(bp["conv"])
            for x in ns:
                if shape[x][0] != c:
                    bad.append(f"'{bp['conv']}' {shape[bp['conv']]} has {c} outputs, its BatchNorm '{x}' {shape[x]}")

    # biases
    bnames = set(sum((g for g in groups.values()), []))
    for n, s in shape.items():
        if len(s) < 2 or n in bnames:
            continue
        b = None
        for pat, rep in ((r"\.weight$", ".bias"), (r"\.w_0$", ".b_0"), (r"/(kernel|filters|pointwise_filter)(:0)?$", r"/bias\2")):
            if re.search(pat, n):
                b = re.sub(pat, rep, n)
                break
        if not b or b not in shape or len(shape[b]) != 1 or b in bnames:
            continue
        if cat and not (tf or keras) and len(s) == 2:
            ok = shape[b][0] in (s[0], s[1])  # ONNX Gemm/MatMul: [in,out] or [out,in]
        else:
            ok = shape[b][0] == out_ch(n)
        if not ok:
            bad.append(f"'{n}' {s} vs its bias '{b}' {shape[b]}")

    # nn.Sequential numbering
    if not (tf or keras):
        mods = {}
        for n in shape:
            if "." in n:
                mods.setdefault(n.rsplit(".", 1)[0], []).append(n.rsplit(".", 1)[1])
        conts = {}
        for mk in mods:
            head, _, idx = mk.rpartition(".")
            if idx.isdigit():
                conts.setdefault(head, []).append(int(idx))
        top_numeric = all(k.split(".")[0].isdigit() for k in mods)
        for head, idxs in conts.items():
            if head == "" and not top_numeric:
                continue
            pre = head + "." if head else ""
            kids = sorted(set(idxs))
            chain = []
            for i in kids:
                k = f"{pre}{i}"
                leaves = mods.get(k, [])
                if "running_mean" in leaves:
                    chain.append(("bn", k + ".running_mean"))
                elif "weight" in leaves and len(shape[k + ".weight"]) >= 2:
                    chain.append(("w", k + ".weight"))
                else:
                    chain.append(("other", k))
            for (ka, a), (kb, b) in zip(chain, chain[1:]):
                if ka == "other" or kb == "other":
                    continue
                c = shape[a][0] if ka == "bn" else out_ch(a)
                if kb == "bn":
                    if shape[b][0] != c:
                        bad.append(f"'{a}' {shape[a]} hands on {c} channels, the BatchNorm after it '{b}' {shape[b]}")
                    continue
                s = shape[b]
                if len(s) >= 3 and s[1] == 1 and s[0] == c:
                    continue  # depthwise
                if s[1] == c or (len(s) == 2 and (ka == "bn" or len(shape[a]) > 2) and s[1] % c == 0):
                    continue
                bad.append(f"'{a}' {shape[a]} hands on {c} channels, its consumer '{b}' {s} reads {s[1]}")

    if path.endswith(".h5") and "model_config" in meta:
        import prune_check
        if prune_check.cmd_keras_consistent([path]):
            bad.append("keras model_config: inconsistent (see above)")
    for b in bad:
        print(f"{path}: {b}", file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
