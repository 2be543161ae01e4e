#!/usr/bin/env python3
"""Independent readers for the CLI tests: what a weight file holds, computed
without npuc, so the tests compare npuc against something it did not write.

safetensors is read with the standard library only (8-byte little-endian
header length, JSON header, data_offsets into the byte buffer after it).
HDF5 is read with h5py: a Keras 2 save_weights tree (root attribute
layer_names, each layer group's weight_names) names tensors by weight name;
any other tree names each dataset by its path.

    npuc_test.py dump FILE            JSON {name: {dtype, shape, sha256}} in file order
    npuc_test.py compare A B [C ...]  exit 1 unless every file holds the same
                                      tensors (names, dtypes, shapes, bytes)
    npuc_test.py counts FILE          JSON {name: {nan, inf, subnormal, zero, finite}}
    npuc_test.py meta FILE            JSON metadata (safetensors __metadata__ /
                                      HDF5 root string attributes)
"""
import array
import hashlib
import json
import struct
import sys

ST_SIZES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "F8_E4M3": 1, "F8_E5M2": 1,
            "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1, "BOOL": 1,
            "U16": 2, "U32": 4, "U64": 8}


def read_st(path):
    """Returns (metadata, [(name, dtype, shape, bytes)]) in data-offset order."""
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack_from("<Q", blob, 0)
    header = json.loads(blob[8:8 + n].decode("utf-8"))
    data = blob[8 + n:]
    meta = header.pop("__metadata__", {}) or {}
    out = []
    for name, e in header.items():
        a, b = e["data_offsets"]
        out.append((name, e["dtype"], list(e["shape"]), data[a:b]))
    out.sort(key=lambda t: header[t[0]]["data_offsets"][0])
    return meta, out


def _np_to_st(dt):
    import numpy as np
    kinds = {
        np.dtype("float64"): "F64", np.dtype("float32"): "F32", np.dtype("float16"): "F16",
        np.dtype("int64"): "I64", np.dtype("int32"): "I32", np.dtype("int16"): "I16",
        np.dtype("int8"): "I8", np.dtype("uint8"): "U8", np.dtype("bool"): "BOOL",
        np.dtype("uint16"): "U16", np.dtype("uint32"): "U32", np.dtype("uint64"): "U64",
    }
    return kinds.get(dt.newbyteorder("="), str(dt))


def _attr_str(v):
    if isinstance(v, bytes):
        return v.decode("utf-8", "replace")
    return str(v)


def read_h5(path):
    import h5py
    import numpy as np
    out = []
    meta = {}
    with h5py.File(path, "r") as f:
        for k, v in f.attrs.items():
            if isinstance(v, (bytes, str)):
                meta[k] = _attr_str(v)

        def tensor(name, ds):
            arr = np.asarray(ds[()])
            le = arr.dtype.newbyteorder("<") if arr.dtype.byteorder not in ("|",) else arr.dtype
            data = np.ascontiguousarray(arr, dtype=le).tobytes()
            out.append((name, _np_to_st(arr.dtype), list(ds.shape), data))

        if "layer_names" in f.attrs:
            for layer in f.attrs["layer_names"]:
                layer = _attr_str(layer)
                g = f[layer]
                for wn in g.attrs.get("weight_names", []):
                    wn = _attr_str(wn)
                    tensor(wn, g[wn])
        else:
            def visit(name, obj):
                if isinstance(obj, h5py.Dataset):
                    tensor(name, obj)
            f.visititems(visit)
    return meta, out


def read_any(path):
    with open(path, "rb") as f:
        magic = f.read(8)
    if magic == b"\x89HDF\r\n\x1a\n":
        return read_h5(path)
    return read_st(path)


def dump(path):
    _, ts = read_any(path)
    return {n: {"dtype": d, "shape": s, "sha256": hashlib.sha256(b).hexdigest()}
            for n, d, s, b in ts}


# ---------------------------------------------------------------- value classes
# (exponent mask, mantissa mask, has_inf, width, struct/array code)
FLOATS = {
    "F64": (0x7ff0000000000000, 0x000fffffffffffff, True, "Q"),
    "F32": (0x7f800000, 0x007fffff, True, "I"),
    "F16": (0x7c00, 0x03ff, True, "H"),
    "BF16": (0x7f80, 0x007f, True, "H"),
    "F8_E4M3": (0x78, 0x07, False, "B"),
    "F8_E5M2": (0x7c, 0x03, True, "B"),
}
INTS = {"I64": "Q", "U64": "Q", "I32": "I", "U32": "I", "I16": "H", "U16": "H",
        "I8": "B", "U8": "B", "BOOL": "B"}


def _words(code, data):
    a = array.array(code)
    a.frombytes(data)
    if sys.byteorder == "big":
        a.byteswap()
    return a


def classify(dtype, data):
    c = {"nan": 0, "inf": 0, "subnormal": 0, "zero": 0, "finite": 0}
    if dtype in INTS:
        w = _words(INTS[dtype], data)
        c["zero"] = sum(1 for v in w if v == 0)
        c["finite"] = len(w)
        return c
    em, mm, has_inf, code = FLOATS[dtype]
    w = _words(code, data)
    for v in w:
        e, m = v & em, v & mm
        if e == em and (has_inf or m == mm):
            if has_inf and m == 0:
                c["inf"] += 1
            else:
                c["nan"] += 1
            continue
        c["finite"] += 1
        if e == 0:
            c["subnormal" if m else "zero"] += 1
    return c


def main(argv):
    if len(argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    cmd, files = argv[1], argv[2:]
    if cmd == "dump":
        print(json.dumps(dump(files[0]), indent=1))
    elif cmd == "meta":
        print(json.dumps(read_any(files[0])[0], indent=1))
    elif cmd == "counts":
        _, ts = read_any(files[0])
        print(json.dumps({n: classify(d, b) for n, d, s, b in ts}, indent=1))
    elif cmd == "compare":
        ref = dump(files[0])
        bad = 0
        for other in files[1:]:
            got = dump(other)
            if list(got) != list(ref) and sorted(got) != sorted(ref):
                missing = sorted(set(ref) - set(got))[:5]
                extra = sorted(set(got) - set(ref))[:5]
                print(f"{other}: tensor names differ from {files[0]}: "
                      f"missing {missing} extra {extra}", file=sys.stderr)
                bad = 1
                continue
            for n, e in ref.items():
                if got[n] != e:
                    print(f"{other}: tensor '{n}': {got[n]} != {e} in {files[0]}",
                          file=sys.stderr)
                    bad = 1
        return bad
    else:
        print(f"unknown command {cmd}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
