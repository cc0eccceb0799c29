"""Read and write safetensors files with numpy only (no safetensors package).

Format (https://github.com/huggingface/safetensors): an 8-byte little-endian
unsigned header length N, then N bytes of UTF-8 JSON
``{name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__":
{str: str}}``, then the raw little-endian tensor bytes; offsets are relative to
the start of the data section. Tensors must tile the data section exactly (no
gaps, no overlap), which is what the reference implementation enforces too.

BF16 has no numpy dtype: it is read by widening the 16 stored bits into the
high half of a float32 (exact) and written by rounding float32 to nearest-even
on the upper 16 bits.
"""

import json
import struct

import numpy as np

# dtype name -> (numpy dtype used to hold the raw bytes, bytes per element)
_RAW = {
    "F64": (np.dtype("<f8"), 8),
    "F32": (np.dtype("<f4"), 4),
    "F16": (np.dtype("<f2"), 2),
    "BF16": (np.dtype("<u2"), 2),
    "I64": (np.dtype("<i8"), 8),
    "I32": (np.dtype("<i4"), 4),
    "I16": (np.dtype("<i2"), 2),
    "I8": (np.dtype("i1"), 1),
    "U8": (np.dtype("u1"), 1),
}

# Headers larger than this are certainly corrupt (the reference implementation
# uses the same 100 MB bound).
_MAX_HEADER = 100_000_000


class SafetensorsError(ValueError):
    """A malformed safetensors file; the message names the file and the fault."""


def bf16_bits_to_f32(bits):
    """uint16 bfloat16 bit patterns -> float32 values (exact)."""
    bits = np.asarray(bits, dtype=np.uint16)
    return (bits.astype(np.uint32) << 16).view(np.float32)


def f32_to_bf16_bits(values):
    """float32 values -> uint16 bfloat16 bit patterns, round to nearest even.

    NaNs are kept NaN (quiet) rather than being rounded into infinities.
    """
    v = np.ascontiguousarray(values, dtype=np.float32)
    u = v.view(np.uint32).astype(np.uint64)
    rounded = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    out = rounded.astype(np.uint16)
    nan = np.isnan(v)
    if nan.any():
        out[nan] = ((u[nan] >> 16) | 0x40).astype(np.uint16)
    return out


def _fail(path, msg):
    raise SafetensorsError(f"{path}: {msg}")


def load(path, bf16="float32"):
    """Reads `path`; returns (tensors: dict name -> np.ndarray, metadata dict).

    `bf16` chooses how BF16 tensors come back: "float32" (widened, exact) or
    "bits" (the raw uint16 patterns). Every structural fault raises
    SafetensorsError naming the file.
    """
    with open(path, "rb") as f:
        blob = f.read()
    return loads(blob, path=path, bf16=bf16)


def loads(blob, path="<bytes>", bf16="float32"):
    if bf16 not in ("float32", "bits"):
        raise ValueError("bf16 must be 'float32' or 'bits'")
    if len(blob) < 8:
        _fail(path, f"file is {len(blob)} bytes, shorter than the 8-byte header length")
    (n,) = struct.unpack("<Q", blob[:8])
    if n > _MAX_HEADER or 8 + n > len(blob):
        _fail(path, f"header length {n} does not fit in a file of {len(blob)} bytes")
    try:
        header = json.loads(blob[8:8 + n].decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        _fail(path, f"header is not valid UTF-8 JSON: {e}")
    if not isinstance(header, dict):
        _fail(path, "header JSON is not an object")
    data = memoryview(blob)[8 + n:]
    metadata = header.pop("__metadata__", None) or {}
    if not isinstance(metadata, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()):
        _fail(path, "__metadata__ must map strings to strings")

    spans = []
    tensors = {}
    for name, info in header.items():
        if not isinstance(info, dict) or set(info) != {"dtype", "shape", "data_offsets"}:
            _fail(path, f"tensor '{name}': entry must have exactly dtype, shape, data_offsets")
        dt, shape, offs = info["dtype"], info["shape"], info["data_offsets"]
        if dt not in _RAW:
            _fail(path, f"tensor '{name}': unsupported dtype '{dt}' (supported: {', '.join(_RAW)})")
        if (not isinstance(shape, list) or
                not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape)):
            _fail(path, f"tensor '{name}': shape must be a list of non-negative integers, got {shape!r}")
        if (not isinstance(offs, list) or len(offs) != 2 or
                not all(isinstance(o, int) and not isinstance(o, bool) for o in offs)):
            _fail(path, f"tensor '{name}': data_offsets must be [begin, end], got {offs!r}")
        begin, end = offs
        np_dt, size = _RAW[dt]
        count = int(np.prod(shape, dtype=np.int64)) if shape else 1
        if not 0 <= begin <= end <= len(data):
            _fail(path, f"tensor '{name}': data_offsets [{begin}, {end}] outside the "
                        f"{len(data)}-byte data section")
        if end - begin != count * size:
            _fail(path, f"tensor '{name}': {dt} {shape} needs {count * size} bytes but "
                        f"data_offsets span {end - begin}")
        spans.append((begin, end, name))
        arr = np.frombuffer(data[begin:end], dtype=np_dt).reshape(shape).copy()
        if dt == "BF16" and bf16 == "float32":
            arr = bf16_bits_to_f32(arr)
        tensors[name] = arr

    # Tensors must tile the data section: anything else is corruption or a
    # writer bug, and silently ignoring bytes hides both.
    pos = 0
    for begin, end, name in sorted(spans):
        if begin != pos:
            what = "overlaps the previous tensor" if begin < pos else f"leaves a gap at byte {pos}"
            _fail(path, f"tensor '{name}' {what}")
        pos = end
    if pos != len(data):
        _fail(path, f"data section has {len(data) - pos} trailing bytes not owned by any tensor")
    return tensors, metadata


def _encode(name, arr, dtype):
    """-> (dtype name, shape, bytes) for one tensor."""
    if hasattr(arr, "detach"):  # torch tensor, without importing torch here
        arr = arr.detach().cpu().numpy()
    arr = np.asarray(arr)
    if dtype is None:
        dtype = {np.dtype("float64"): "F64", np.dtype("float32"): "F32",
                 np.dtype("float16"): "F16", np.dtype("int64"): "I64",
                 np.dtype("int32"): "I32", np.dtype("int16"): "I16",
                 np.dtype("int8"): "I8", np.dtype("uint8"): "U8"}.get(arr.dtype)
        if dtype is None:
            raise SafetensorsError(f"tensor '{name}': cannot store numpy dtype {arr.dtype}; "
                                   "pass dtype= explicitly")
    if dtype not in _RAW:
        raise SafetensorsError(f"tensor '{name}': unsupported dtype '{dtype}'")
    if dtype == "BF16":
        raw = arr if arr.dtype == np.uint16 else f32_to_bf16_bits(arr)
    else:
        raw = arr.astype(_RAW[dtype][0])
    return dtype, list(arr.shape), np.ascontiguousarray(raw).tobytes()


def dumps(tensors, metadata=None, dtype=None):
    """Serialises {name: array} (numpy or torch). `dtype` is None (from each
    array), one dtype name for all, or a {name: dtype name} dict. BF16 accepts
    float arrays (rounded) or uint16 bit patterns."""
    header = {}
    chunks = []
    pos = 0
    for name in sorted(tensors):
        if name == "__metadata__":
            raise SafetensorsError("'__metadata__' is reserved and cannot name a tensor")
        want = dtype.get(name) if isinstance(dtype, dict) else dtype
        dt, shape, raw = _encode(name, tensors[name], want)
        header[name] = {"dtype": dt, "shape": shape, "data_offsets": [pos, pos + len(raw)]}
        chunks.append(raw)
        pos += len(raw)
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    hjson = json.dumps(header, separators=(",", ":")).encode("utf-8")
    # Pad the header with spaces so the data section starts 8-byte aligned, as
    # the reference writer does; readers that mmap rely on it.
    hjson += b" " * (-len(hjson) % 8)
    return struct.pack("<Q", len(hjson)) + hjson + b"".join(chunks)


def save(path, tensors, metadata=None, dtype=None):
    blob = dumps(tensors, metadata=metadata, dtype=dtype)
    with open(path, "wb") as f:
        f.write(blob)
