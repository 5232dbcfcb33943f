"""safetensors with nothing but json and numpy (the format: an 8-byte
little-endian header length, a JSON header naming each tensor's dtype, shape
and byte range, then the raw little-endian data). Python's safetensors package
is not in Debian 12; the interop tests read and write heed's files with this."""
import json
import struct

import numpy as np

CODES = {"F32": "<f4", "F64": "<f8", "I64": "<i8"}
NAMES = {np.dtype("float32"): "F32", np.dtype("float64"): "F64", np.dtype("int64"): "I64"}


def read(path):
    """(tensors by name, the __metadata__ dict)."""
    b = open(path, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    header = json.loads(b[8:8 + n])
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        s, t = e["data_offsets"]
        out[name] = np.frombuffer(b[8 + n + s:8 + n + t], dtype=CODES[e["dtype"]]).reshape(e["shape"])
    return out, header.get("__metadata__", {})


def write(path, tensors):
    header, blobs, offset = {}, [], 0
    for name, a in tensors.items():
        a = np.ascontiguousarray(a)
        header[name] = {"dtype": NAMES[a.dtype], "shape": list(a.shape), "data_offsets": [offset, offset + a.nbytes]}
        blobs.append(a.astype(a.dtype.newbyteorder("<")).tobytes())
        offset += a.nbytes
    text = json.dumps(header).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))
