"""ckpt_check.py - Hugging Face sharded checkpoints for tests/cli/checkpoints.sh,
read and written here from the layout transformers uses (save_pretrained):
safetensors shards, model.safetensors.index.json {"metadata": {"total_size"},
"weight_map": {name: shard}}, side files.  Independent of npuc.

  make DIR FLAT            a 3-shard checkpoint + index + config.json, tokenizer
                           files, generation_config.json; FLAT the same tensors
                           in one safetensors file
  same A B                 tensors of A and B (files or checkpoint dirs) equal:
                           names, dtypes, shapes, bytes
  index DIR [MAX]          the index validates: each tensor in exactly one shard,
                           shards hold exactly what the map says, total_size is
                           the sum of tensor bytes; with MAX, shards are filled
                           greedily in order up to MAX bytes
  shards DIR A B...        DIR's shard files are exactly A B...
  sides SRC DST            SRC's side files are in DST byte for byte
  (several commands in one run: separate them with ",")
  hostile DIR KIND         rewrite DIR's index hostile: dotdot, absolute,
                           twoshards, inboth, missing, ghost, unlisted, notstring, huge
"""
import json, os, struct, sys
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import io_models  # noqa: E402  (the safetensors writer the tests share)

DT = {"F32": np.float32, "F16": np.float16, "BF16": None, "I8": np.int8, "U8": np.uint8,
      "I32": np.int32, "I64": np.int64, "I16": np.int16}
SIDES = ["config.json", "tokenizer.json", "tokenizer_config.json", "generation_config.json"]


def read_st(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        hdr = json.loads(f.read(n))
        data = f.read()
    meta = hdr.pop("__metadata__", {})
    out = {}
    for k, v in hdr.items():
        b, e = v["data_offsets"]
        out[k] = (v["dtype"], tuple(v["shape"]), data[b:e])
    return out, meta


def save_st(path, tensors, meta=None):
    io_models.write(path, tensors.items(), meta, keep_dtype=True)


def read_any(p):
    """All tensors of a safetensors file or a checkpoint directory."""
    if os.path.isfile(p):
        return read_st(p)[0]
    idx = [f for f in os.listdir(p) if f.endswith(".safetensors.index.json")]
    files = sorted(set(json.load(open(os.path.join(p, idx[0])))["weight_map"].values())) if idx else ["model.safetensors"]
    out = {}
    for f in files:
        t, _ = read_st(os.path.join(p, f))
        for k in t:
            assert k not in out, f"{k} in two shards"
        out.update(t)
    return out


def make(d, flat):
    rng = np.random.default_rng(16)
    os.makedirs(d, exist_ok=True)
    names = [("model.embed_tokens.weight", (96, 64), np.float16)]
    for l in range(3):
        for p in ["q_proj", "k_proj", "v_proj", "o_proj"]:
            names.append((f"model.layers.{l}.self_attn.{p}.weight", (64, 64), np.float32))
        names.append((f"model.layers.{l}.mlp.gate_proj.weight", (128, 64), np.float32))
        names.append((f"model.layers.{l}.mlp.up_proj.weight", (128, 64), np.float32))
        names.append((f"model.layers.{l}.mlp.down_proj.weight", (64, 128), np.float32))
        names.append((f"model.layers.{l}.input_layernorm.weight", (64,), np.float32))
    names.append(("lm_head.weight", (96, 64), np.float32))
    allt = {n: rng.standard_normal(s).astype(dt) for n, s, dt in names}
    # shard boundaries not on layer boundaries, as transformers' byte-based split does
    cuts = [0, 9, 19, len(names)]
    wm = {}
    for k in range(3):
        fn = f"model-{k + 1:05d}-of-00003.safetensors"
        sh = {n: allt[n] for n, _, _ in names[cuts[k]:cuts[k + 1]]}
        save_st(os.path.join(d, fn), sh, {"format": "pt"})
        wm.update({n: fn for n in sh})
    json.dump({"metadata": {"total_size": sum(a.nbytes for a in allt.values())}, "weight_map": wm},
              open(os.path.join(d, "model.safetensors.index.json"), "w"), indent=2)
    json.dump({"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64,
               "intermediate_size": 128, "num_hidden_layers": 3, "rms_norm_eps": 1e-06, "torch_dtype": "float32"},
              open(os.path.join(d, "config.json"), "w"), indent=2)
    open(os.path.join(d, "tokenizer.json"), "w").write('{"version": "1.0", "model": {"type": "BPE", "vocab": {"\\u00e9": 0}}}\n')
    open(os.path.join(d, "tokenizer_config.json"), "wb").write(b'{"model_max_length": 2048}')  # no final newline
    open(os.path.join(d, "generation_config.json"), "w").write('{\n  "do_sample": false\n}\n')
    save_st(flat, allt, {"format": "pt"})


def same(a, b):
    x, y = read_any(a), read_any(b)
    assert sorted(x) == sorted(y), (sorted(set(x) ^ set(y)))[:10]
    for k in x:
        assert x[k] == y[k], f"tensor {k} differs: {x[k][:2]} vs {y[k][:2]}"
    print(f"same: {len(x)} tensors")


def index(d, mx=None):
    idxf = [f for f in os.listdir(d) if f.endswith(".safetensors.index.json")]
    assert len(idxf) == 1, idxf
    ix = json.load(open(os.path.join(d, idxf[0])))
    wm = ix["weight_map"]
    assert list(wm) == sorted(wm), "weight_map not sorted"
    seen, total = {}, 0
    order = []
    for f in sorted(set(wm.values())):
        t, _ = read_st(os.path.join(d, f))
        order.append((f, t))
        for k, (dt, sh, b) in t.items():
            assert k not in seen, f"{k} in {seen.get(k)} and {f}"
            assert wm.get(k) == f, f"{k} in {f} but the index says {wm.get(k)}"
            seen[k] = f
            total += len(b)
    assert set(seen) == set(wm), sorted(set(wm) - set(seen))[:5]
    assert ix["metadata"]["total_size"] == total, (ix["metadata"]["total_size"], total)
    sts = [f for f in os.listdir(d) if f.endswith(".safetensors")]
    assert sorted(sts) == sorted(set(wm.values())), "shard files not in the index"
    if mx is not None:
        mx = int(mx)
        n = len(order)
        for i, (f, t) in enumerate(order):
            assert f == f"model-{i + 1:05d}-of-{n:05d}.safetensors", f
            size = sum(len(v[2]) for v in t.values())
            assert size <= mx or len(t) == 1, f"{f}: {size} > {mx}"
            if i + 1 < n:  # greedy: the next shard's first tensor did not fit
                nxt = order[i + 1][1]
                first = next(iter(nxt.values()))
                assert size + len(first[2]) > mx, f"{f}: {size} + {len(first[2])} fits {mx}"
    print(f"index: {len(wm)} tensors in {len(order)} shards, total_size {total}")


def shards(d, *names):
    got = sorted(f for f in os.listdir(d) if f.endswith(".safetensors"))
    assert got == sorted(names), got


def sides(src, dst):
    for f in SIDES:
        assert open(os.path.join(src, f), "rb").read() == open(os.path.join(dst, f), "rb").read(), f
    print("sides: equal")


def hostile(d, kind):
    p = os.path.join(d, "model.safetensors.index.json")
    ix = json.load(open(p))
    wm = ix["weight_map"]
    k0 = next(iter(wm))
    if kind == "dotdot":
        wm[k0] = "../" + wm[k0]
    elif kind == "absolute":
        wm[k0] = "/etc/passwd.safetensors"
    elif kind == "twoshards":  # the index keeps one shard, the other shard also holds the tensor
        open(p, "w").write(json.dumps(ix)[:-2] + ', "%s": "model-00002-of-00003.safetensors"}}' % k0)
        return
    elif kind == "inboth":  # shard 2 also stores a tensor the index puts in shard 1
        s2 = os.path.join(d, "model-00002-of-00003.safetensors")
        t2, meta = read_st(s2)
        t1, _ = read_st(os.path.join(d, wm[k0]))
        t2[k0] = t1[k0]
        hdr, off, blobs = {"__metadata__": meta}, 0, []
        for k, (dt, sh, b) in t2.items():
            hdr[k] = {"dtype": dt, "shape": list(sh), "data_offsets": [off, off + len(b)]}
            off += len(b)
            blobs.append(b)
        h = json.dumps(hdr).encode()
        with open(s2, "wb") as f:
            f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))
        return
    elif kind == "missing":
        wm[k0] = "model-00009-of-00009.safetensors"
    elif kind == "notstring":
        wm[k0] = 7
    elif kind == "huge":  # sparse: 65 MiB of zeros cost no disk and no time
        with open(p, "wb") as f:
            f.write(b'{"weight_map": {')
            f.seek(65 << 20)
            f.write(b"}}")
        return
    elif kind == "ghost":
        wm["model.ghost.weight"] = wm[k0]
    elif kind == "unlisted":
        del wm[k0]
    json.dump(ix, open(p, "w"))


def run_commands(ns, argv):
    """Runs the commands in argv, separated by "," (numpy's import is the slow
    part of a run): "a x y , b z" calls ns["a"]("x", "y") then ns["b"]("z")."""
    cmd = []
    for a in argv + [","]:
        if a == ",":
            if cmd:
                ns[cmd[0]](*cmd[1:])
            cmd = []
        else:
            cmd.append(a)


if __name__ == "__main__":
    run_commands(globals(), sys.argv[1:])
