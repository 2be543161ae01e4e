#!/usr/bin/env python3
"""gguf_mix_check.py - test support for tests/cli/gguf_mix.sh and
bench/gguf_mix_vs_llama.sh, written from ggml's docs/gguf.md and llama.cpp's
src/llama-quant.cpp (commit 007dbbf3), independently of npuc's C code.

  make OUT LAYERS EMBD FF HEAD HEAD_KV [--experts N] [--tied] [--qkv]
      a llama-architecture GGUF v3 of F32 tensors (hyperparameters, no
      vocabulary), llama.cpp's tensor names, random weights
  types FILE
      "name TYPE" for every tensor in FILE's header
  expect FILE MIX [REGEX=TYPE ...]
      "name TYPE" that llama-quantize's rules give every tensor of FILE
  check SRC OUT MIX [REGEX=TYPE ...] [--ftype N] [--lines FILE]
      compares OUT's types with `expect SRC MIX`; with --ftype, OUT's
      general.file_type; with --lines, that FILE (npuc convert's stdout)
      has one line "NAME  TYPE: reason" per tensor, in OUT's order; exits 1
      naming each difference
  safetensors OUT
      a small safetensors file without metadata
"""
import re
import struct
import sys

TYPES = {0: "F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 6: "Q5_0", 7: "Q5_1", 8: "Q8_0", 10: "Q2_K", 11: "Q3_K",
         12: "Q4_K", 13: "Q5_K", 14: "Q6_K", 20: "IQ4_NL", 30: "BF16"}
BLOCK = {"Q4_0": 32, "Q4_1": 32, "Q5_0": 32, "Q5_1": 32, "Q8_0": 32, "Q2_K": 256, "Q3_K": 256, "Q4_K": 256,
         "Q5_K": 256, "Q6_K": 256}
MIX_BASE = {"q2_k": "Q2_K", "q3_k_s": "Q3_K", "q3_k_m": "Q3_K", "q3_k_l": "Q3_K", "q4_k_s": "Q4_K",
            "q4_k_m": "Q4_K", "q5_k_s": "Q5_K", "q5_k_m": "Q5_K", "q6_k": "Q6_K"}


# ------------------------------------------------------------ writing

def _s(x):
    b = x.encode()
    return struct.pack("<Q", len(b)) + b


def make(out, layers, embd, ff, head, head_kv, experts=0, tied=False, qkv=False):
    import numpy as np
    rng = np.random.default_rng(1234)
    vocab = 64
    kv = embd // head * head_kv
    meta = [("general.architecture", 8, "llama"), ("general.name", 8, "npuc mix test"),
            ("llama.block_count", 4, layers), ("llama.context_length", 4, 256),
            ("llama.embedding_length", 4, embd), ("llama.feed_forward_length", 4, ff),
            ("llama.attention.head_count", 4, head), ("llama.attention.head_count_kv", 4, head_kv),
            ("llama.attention.layer_norm_rms_epsilon", 6, 1e-5), ("llama.rope.dimension_count", 4, embd // head),
            ("llama.vocab_size", 4, vocab)]
    if experts:
        meta += [("llama.expert_count", 4, experts), ("llama.expert_used_count", 4, 2)]
    # (name, ne innermost first)
    ts = [("token_embd.weight", (embd, vocab)), ("output_norm.weight", (embd,))]
    if not tied:
        ts.append(("output.weight", (embd, vocab)))
    for i in range(layers):
        p = "blk.%d." % i
        ts.append((p + "attn_norm.weight", (embd,)))
        if qkv:
            ts.append((p + "attn_qkv.weight", (embd, embd + 2 * kv)))
        else:
            ts += [(p + "attn_q.weight", (embd, embd)), (p + "attn_k.weight", (embd, kv)),
                   (p + "attn_v.weight", (embd, kv))]
        ts += [(p + "attn_output.weight", (embd, embd)), (p + "ffn_norm.weight", (embd,))]
        if experts:
            ts += [(p + "ffn_gate_inp.weight", (embd, experts)), (p + "ffn_gate_exps.weight", (embd, ff, experts)),
                   (p + "ffn_down_exps.weight", (ff, embd, experts)), (p + "ffn_up_exps.weight", (embd, ff, experts))]
        else:
            ts += [(p + "ffn_gate.weight", (embd, ff)), (p + "ffn_down.weight", (ff, embd)),
                   (p + "ffn_up.weight", (embd, ff))]
    h = b"GGUF" + struct.pack("<IQQ", 3, len(ts), len(meta))
    for k, t, v in meta:
        h += _s(k) + struct.pack("<I", t)
        h += _s(v) if t == 8 else struct.pack("<I", v) if t == 4 else struct.pack("<f", v)
    off, datas = 0, []
    for name, ne in ts:
        n = 1
        for x in ne:
            n *= x
        d = (rng.standard_normal(n) * 0.05).astype("<f4").tobytes()
        h += _s(name) + struct.pack("<I", len(ne)) + b"".join(struct.pack("<Q", x) for x in ne)
        h += struct.pack("<IQ", 0, off)
        datas.append(d)
        off += (len(d) + 31) // 32 * 32
    h += b"\0" * (-len(h) % 32)
    with open(out, "wb") as f:
        f.write(h)
        for d in datas:
            f.write(d + b"\0" * (-len(d) % 32))


# ------------------------------------------------------------ reading

class _R:
    def __init__(self, b):
        self.b, self.o = b, 0

    def u(self, fmt):
        v = struct.unpack_from("<" + fmt, self.b, self.o)
        self.o += struct.calcsize("<" + fmt)
        return v[0]

    def s(self):
        n = self.u("Q")
        v = self.b[self.o:self.o + n].decode()
        self.o += n
        return v

    def val(self, t):
        fm = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}
        if t == 8:
            return self.s()
        if t == 9:
            et, n = self.u("I"), self.u("Q")
            return [self.val(et) for _ in range(n)]
        return self.u(fm[t])


def read_header(path):
    """(metadata dict, [(name, ne tuple, type name)]) from a GGUF v3 header."""
    with open(path, "rb") as f:
        b = f.read(1 << 24)
    r = _R(b)
    assert b[:4] == b"GGUF", path
    r.o = 4
    ver, nt, nkv = r.u("I"), r.u("Q"), r.u("Q")
    assert ver == 3, ver
    meta = {}
    for _ in range(nkv):
        k = r.s()
        meta[k] = r.val(r.u("I"))
    ts = []
    for _ in range(nt):
        name = r.s()
        nd = r.u("I")
        ne = tuple(r.u("Q") for _ in range(nd))
        ty = r.u("I")
        r.u("Q")
        ts.append((name, ne, TYPES.get(ty, "type%d" % ty)))
    return meta, ts


# ------------------------------------------------------------ llama-quantize's rules

def _more_bits(i, n):
    return i < n // 8 or i >= 7 * n // 8 or (i - n // 8) % 3 == 2


def _cat(name):
    if name == "output.weight":
        return "output"
    if name in ("token_embd.weight", "per_layer_token_embd.weight"):
        return "token_embd"
    for key, cat in (("attn_qkv.weight", "attn_v"), ("attn_kv_b.weight", "attn_v"), ("attn_v.weight", "attn_v"),
                     ("attn_k.weight", "attn_k"), ("attn_q.weight", "attn_q"), ("attn_output.weight", "attn_output"),
                     ("ffn_up", "ffn_up"), ("ffn_gate", "ffn_gate"), ("ffn_down", "ffn_down")):
        if key in name:
            return cat
    return "other"


def _layer(name):
    m = re.match(r"blk\.(\d+)\.", name)
    return int(m.group(1)) if m else -1


def expect(src, mix, rules=()):
    meta, ts = read_header(src)
    arch = meta["general.architecture"]
    nl = meta["%s.block_count" % arch]
    nexp = meta.get("%s.expert_count" % arch, 0)
    nh = meta["%s.attention.head_count" % arch]
    nkv = meta.get("%s.attention.head_count_kv" % arch, nh)
    gqa = nh // nkv if nkv else 0
    is70b = arch == "llama" and nl == 80 and nh != nkv and nexp != 8
    falcon = arch == "falcon"
    tied = not any(n == "output.weight" for n, _, _ in ts)
    n_wv = sum(_cat(n) == "attn_v" for n, _, _ in ts)
    cnt = {"attn_v": 0, "ffn_down": 0, "ffn_gate": 0, "ffn_up": 0}
    comp = [(re.compile(p.lower()), t.upper()) for p, t in (r.split("=", 1) for r in rules)]
    base = MIX_BASE[mix]
    out = {}
    for name, ne, ty in sorted(ts, key=lambda x: (_layer(x[0]), x[0])):
        nd = max([i + 1 for i, x in enumerate(ne) if x > 1] or [1])
        skip = nd < 2 or not name.endswith("weight") or "_norm.weight" in name or "ffn_gate_inp.weight" in name
        if skip:
            out[name] = "F32"
            continue
        new = base
        over = [t for rx, t in comp if rx.search(name)]
        cat = _cat(name)
        if over:
            new = over[0]
        else:
            if cat == "output" or (tied and cat == "token_embd"):
                new = "Q8_0" if (falcon or ne[0] % 256) else "Q6_K"
            elif cat == "attn_v":
                i = cnt["attn_v"]
                if mix == "q2_k":
                    new = "Q4_K" if gqa >= 4 else "Q3_K"
                elif mix == "q3_k_m":
                    new = "Q5_K" if i < 2 else "Q4_K"
                elif mix == "q3_k_l":
                    new = "Q5_K"
                elif mix in ("q4_k_m", "q5_k_m") and _more_bits(i, n_wv):
                    new = "Q6_K"
                elif mix == "q4_k_s" and i < 4:
                    new = "Q5_K"
                if is70b and new in ("Q3_K", "Q4_K"):
                    new = "Q5_K"
                if nexp == 8:
                    new = "Q8_0"
                cnt["attn_v"] += 1
            elif cat == "attn_k":
                if nexp == 8:
                    new = "Q8_0"
            elif cat in ("ffn_down", "ffn_gate", "ffn_up"):
                i = _layer(name) if nexp > 1 else cnt[cat]
                cnt[cat] += 1
                if cat == "ffn_down":
                    if mix == "q2_k":
                        new = "Q3_K"
                    elif mix == "q3_k_m":
                        new = "Q5_K" if i < nl // 16 else "Q4_K" if (not falcon or _more_bits(i, nl)) else "Q3_K"
                    elif mix == "q3_k_l":
                        new = "Q4_K" if falcon else "Q5_K"
                    elif mix == "q4_k_m":
                        if falcon:
                            new = "Q6_K" if i < nl // 16 else "Q5_K" if _more_bits(i, nl) else "Q4_K"
                        elif _more_bits(i, nl):
                            new = "Q6_K"
                    elif mix == "q5_k_m" and _more_bits(i, nl):
                        new = "Q6_K"
                    elif mix == "q4_k_s" and not falcon and i < nl // 8:
                        new = "Q5_K"
            elif cat == "attn_output":
                if not falcon:
                    if nexp == 8:
                        if mix in ("q2_k", "q3_k_s", "q3_k_m", "q4_k_s", "q4_k_m"):
                            new = "Q5_K"
                    else:
                        new = {"q2_k": "Q3_K", "q3_k_m": "Q4_K", "q3_k_l": "Q5_K"}.get(mix, new)
                elif mix == "q3_k_l":
                    new = "Q4_K"
        if BLOCK.get(new, 1) == 256 and ne[0] % 256:
            new = {"Q2_K": "Q4_0", "Q3_K": "Q4_0", "Q4_K": "Q5_0", "Q5_K": "Q5_1", "Q6_K": "Q8_0"}[new]
            if ne[0] % 32:
                new = "F16"
        out[name] = new
    return out


def main(argv):
    cmd = argv[1]
    if cmd == "make":
        a = argv[2:]
        kw = {"experts": 0, "tied": False, "qkv": False}
        pos = []
        i = 0
        while i < len(a):
            if a[i] == "--experts":
                kw["experts"] = int(a[i + 1])
                i += 2
                continue
            if a[i] in ("--tied", "--qkv"):
                kw[a[i][2:]] = True
            else:
                pos.append(a[i])
            i += 1
        make(pos[0], *map(int, pos[1:6]), **kw)
    elif cmd == "types":
        for n, _, t in read_header(argv[2])[1]:
            print(n, t)
    elif cmd == "expect":
        for n, t in expect(argv[2], argv[3], argv[4:]).items():
            print(n, t)
    elif cmd == "check":
        a, ftype, lines = argv[5:], None, None
        if "--lines" in a:
            i = a.index("--lines")
            lines = a[i + 1]
            a = a[:i] + a[i + 2:]
        if "--ftype" in a:
            i = a.index("--ftype")
            ftype = int(a[i + 1])
            a = a[:i] + a[i + 2:]
        want = expect(argv[2], argv[4], a)
        meta, ts = read_header(argv[3])
        got = {n: t for n, _, t in ts}
        bad = ["%s: %s: expected %s, got %s" % (argv[3], n, want[n], got.get(n)) for n in want
               if want[n] != got.get(n)]
        if set(got) != set(want):
            bad.append("%s: tensor names differ" % argv[3])
        if ftype is not None and meta.get("general.file_type") != ftype:
            bad.append("%s: general.file_type %s, expected %d" % (argv[3], meta.get("general.file_type"), ftype))
        if lines is not None:
            ls = [l.rstrip("\n") for l in open(lines) if l.strip()]
            if len(ls) != len(ts):
                bad.append("%s: %d lines, %d tensors" % (lines, len(ls), len(ts)))
            for l, (n, _, t) in zip(ls, ts):
                if not re.match(re.escape(n) + r" +" + t + ": ", l):
                    bad.append("%s: line %r does not say %s %s" % (lines, l, n, t))
        for b in bad:
            print(b)
        return 1 if bad else 0
    elif cmd == "safetensors":
        import json
        h = json.dumps({"a.weight": {"dtype": "F32", "shape": [32, 64], "data_offsets": [0, 8192]}}).encode()
        h += b" " * (-len(h) % 8)
        with open(argv[2], "wb") as f:
            f.write(struct.pack("<Q", len(h)) + h + b"\0" * 8192)
    else:
        print(__doc__)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
