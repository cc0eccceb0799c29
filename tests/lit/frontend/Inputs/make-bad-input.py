"""Writes inputs that should not be checked into the repository as text:
binary files, deep nesting, oversized files. Usage: make-bad-input.py KIND OUT"""
import sys

kind, out = sys.argv[1], sys.argv[2]
prefix = b"model:\n  family: mlp\n"
if kind == "nul":
    data = prefix + b"  vocab: 25\x006\n"
elif kind == "utf8":
    data = prefix + b"  vocab: 256 # caf\xe9\n"
elif kind == "utf16":
    data = "model: {family: mlp}\n".encode("utf-16")
elif kind == "deep-flow":
    data = b"model: " + b"[" * 100000 + b"\n"
elif kind == "deep-block":
    data = b"".join(b" " * i + b"- \n" for i in range(200))
elif kind == "huge":
    data = b"# " + b"x" * (65 << 20) + b"\n"
else:
    sys.exit("unknown kind " + kind)
with open(out, "wb") as f:
    f.write(data)
