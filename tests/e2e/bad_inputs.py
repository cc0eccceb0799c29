#!/usr/bin/python3
"""Bad inputs to the training binary and to `strata compile` give a clear
error and a non-zero exit, and never cost the user a file.

Every case runs one failing command and checks that
  * the exit status is the documented one (1 for errors, CLI11's >= 100 for a
    malformed flag), never a signal;
  * stderr names the flag and/or the file and says what is wrong (the
    offending token's index and value, the missing and the extra tensor
    names, the shape, the dtype, ...), and shows no crash (no "terminate
    called", assertion or sanitizer text);
  * nothing on disk changed: every file under the scratch directory keeps its
    bytes and no file appears or disappears. Runtime cases also pass
    --log and --save targets that already exist (a log and a checkpoint),
    so a failing start must leave both as they were.
"""

import os
import re
import struct
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from e2e_common import Session, expect_error  # noqa: E402

S = Session(__doc__)
sys.path.insert(0, S.reference)
import safetensors_io  # noqa: E402


# -- fixtures -------------------------------------------------------------------


def tokens_file(name, values, dtype="<u2"):
    return S.write_bytes(name, np.asarray(values, dtype=dtype).tobytes())


def setup():
    """Binaries, valid inputs and the files a failing run must not touch."""
    fx = {}
    gpt_spec = os.path.join(S.examples, "gpt-tiny.yaml")   # vocab 512, seq_len 64
    fx["gpt"] = S.compile(gpt_spec, "gpt")
    fx["init"] = S.path("init.safetensors")
    S.reference_tool("make_inputs.py", "--model-yaml", gpt_spec, "--init-out", fx["init"],
                     "--seed", "0")
    fx["log"] = S.write_text("precious.jsonl", '{"step": 0, "loss": 1.0}\n')
    fx["ckpt"] = S.path("precious.ckpt")
    S.run([fx["gpt"], "--steps", 2, "--save", fx["ckpt"]])

    # A checkpoint of another model (vocab 256) with the same parameter names.
    with open(gpt_spec) as f:
        other = S.write_text("gpt-v256.yaml", f.read().replace("vocab: 512", "vocab: 256"))
    other_bin = S.compile(other, "gpt-v256")
    fx["other_ckpt"] = S.path("v256.ckpt")
    S.run([other_bin, "--steps", 1, "--save", fx["other_ckpt"]])
    os.remove(other_bin)

    tensors, _ = safetensors_io.load(fx["init"])
    t = dict(tensors)
    t["token_embedding"] = t.pop("wte.weight")
    safetensors_io.save(S.path("badname.safetensors"), t)
    t = dict(tensors)
    t["wpe.weight"] = t["wpe.weight"][:10]
    safetensors_io.save(S.path("badshape.safetensors"), t)
    t = dict(tensors)
    t["ln_f.bias"] = t["ln_f.bias"].astype(np.int32)
    safetensors_io.save(S.path("baddtype.safetensors"), t)
    with open(fx["init"], "rb") as f:
        blob = f.read()
    S.write_bytes("truncated.safetensors", blob[:len(blob) - 100])

    S.write_bytes("empty.bin", b"")
    S.write_bytes("odd.bin", b"\x01\x00\x02")
    S.write_bytes("odd32.bin", b"\x01\x00\x00\x00\x02\x00")
    tokens_file("short.bin", np.arange(64))               # needs seq_len + 1 = 65
    big = np.zeros(1000, dtype=np.int64)
    big[777] = 600
    tokens_file("big.bin", big)
    big32 = np.zeros(5000, dtype=np.int64)
    big32[4321] = 70000
    tokens_file("big32.bin", big32, "<u4")
    # GPT-2-sized ids written as uint32 (read as uint16: t, 0, u, 0, ...),
    # and uint16 ids read as uint32 (pairs of ids).
    tokens_file("wide.bin", (np.arange(5000) * 7 + 1) % 500, "<u4")
    tokens_file("narrow.bin", (np.arange(5000) * 7 + 1) % 500 + 1, "<u2")
    os.mkdir(S.path("notackpt"))
    S.write_text(os.path.join("notackpt", "notes.txt"), "not a checkpoint\n")
    os.mkdir(S.path("garbled.ckpt"))
    S.write_text(os.path.join("garbled.ckpt", "trainer.json"), "{garbage")

    # Executables with a damaged program: one byte flipped inside the program,
    # and the file cut short (which loses the trailer).
    with open(fx["gpt"], "rb") as f:
        exe = f.read()
    offset, length = struct.unpack("<QQ", exe[-24:-8])
    flipped = bytearray(exe)
    flipped[offset + length // 2] ^= 0x10
    fx["corrupt"] = S.write_bytes("gpt-corrupt", bytes(flipped))
    fx["truncated"] = S.write_bytes("gpt-truncated", exe[:offset + length // 2])
    for k in ("corrupt", "truncated"):
        os.chmod(fx[k], 0o755)
    return fx


# -- cases ----------------------------------------------------------------------


def runtime_cases(fx):
    gpt = fx["gpt"]

    def run(label, args, needles, binary=gpt, save=True, cli_error=False):
        keep = ["--log", fx["log"]] + (["--save", fx["ckpt"]] if save else [])
        expect_error(S, label, [binary, "--steps", 3, *args, *keep], needles, cli_error)

    run("missing data file", ["--data", "missing.bin"],
        ["--data", "missing.bin", "No such file"])
    run("empty data file", ["--data", "empty.bin"], ["--data", "empty.bin", "empty"])
    run("odd byte count for uint16", ["--data", "odd.bin"],
        ["--data", "odd.bin", "3 bytes", "uint16"])
    run("byte count not a multiple of 4 for uint32",
        ["--data", "odd32.bin", "--data-dtype", "uint32"],
        ["--data", "odd32.bin", "6 bytes", "uint32"])
    run("fewer than seq_len + 1 tokens", ["--data", "short.bin"],
        ["--data", "short.bin", "64 tokens", "65"])
    run("token >= vocab (uint16)", ["--data", "big.bin"],
        ["--data", "big.bin", re.compile(r"\b777\b"), re.compile(r"\b600\b"), "512"])
    run("token >= vocab (uint32)", ["--data", "big32.bin", "--data-dtype", "uint32"],
        ["--data", "big32.bin", re.compile(r"\b4321\b"), re.compile(r"\b70000\b")])
    run("uint32 tokens read as uint16", ["--data", "wide.bin"],
        ["--data", "wide.bin", "every second uint16 token is 0", "--data-dtype uint32"])
    run("uint16 tokens read as uint32", ["--data", "narrow.bin", "--data-dtype", "uint32"],
        ["--data", "narrow.bin", "looks like uint16 tokens", "drop --data-dtype uint32"])
    run("unknown --data-dtype", ["--data", "big.bin", "--data-dtype", "uint64"],
        ["--data-dtype", "uint64"], cli_error=True)

    run("--init file missing", ["--init", "missing.safetensors"],
        ["missing.safetensors", "No such file"])
    run("--init with a wrong tensor name", ["--init", "badname.safetensors"],
        ["badname.safetensors", "wte.weight", "token_embedding"])
    run("--init with a wrong shape", ["--init", "badshape.safetensors"],
        ["badshape.safetensors", "wpe.weight", re.compile(r"\b10\b"), "64"])
    run("--init with a wrong dtype", ["--init", "baddtype.safetensors"],
        ["baddtype.safetensors", "ln_f.bias", "I32"])
    run("--init truncated safetensors", ["--init", "truncated.safetensors"],
        ["truncated.safetensors", "truncated"])
    run("--init is a token file", ["--init", "big.bin"], ["big.bin", "safetensors"])

    run("embedded program corrupted", [], ["checksum"], binary=fx["corrupt"])
    run("executable truncated", [], ["program"], binary=fx["truncated"])

    run("--resume of a directory that is not a checkpoint", ["--resume", "notackpt"],
        ["--resume", "notackpt", "checkpoint"])
    run("--resume of a missing directory", ["--resume", "missing.ckpt"],
        ["--resume", "missing.ckpt"])
    run("--resume with a garbled trainer.json", ["--resume", "garbled.ckpt"],
        ["garbled.ckpt", "trainer.json"])
    run("--resume of another model's checkpoint", ["--resume", fx["other_ckpt"]],
        ["v256.ckpt", "wte.weight", "256", "512"])
    run("--resume with another --seed", ["--resume", fx["ckpt"], "--seed", "99"],
        ["--seed", "99"])
    run("--save into a directory that is not a checkpoint", ["--save", "notackpt"],
        ["--save", "notackpt", "not a Strata run directory", "notes.txt"], save=False)
    run("--save onto an existing file", ["--save", "precious.jsonl"],
        ["--save", "precious.jsonl"], save=False)


def compile_cases(fx):
    gpt_spec = os.path.join(S.examples, "gpt-tiny.yaml")
    existing = S.write_bytes("existing-exe", b"an executable the user already has\n")

    def compile_(label, spec, out, needles, cluster="local:1"):
        expect_error(S, label, [S.strata, "compile", spec, "--cluster", cluster, "-o", out],
                     needles)

    compile_("-o into a missing directory", gpt_spec, "nodir/sub/gpt",
             ["nodir/sub/gpt", "No such file"])
    os.mkdir(S.path("outdir"))
    compile_("-o naming an existing directory", gpt_spec, "outdir",
             ["outdir", "directory"])
    for cluster in ("local:0", "local:x", "gpu:8", "local:-1"):
        compile_(f"--cluster {cluster}", gpt_spec, existing,
                 ["--cluster", cluster, "local:N"], cluster=cluster)

    # Located spec errors; the failing compiles write to an existing file,
    # which must keep its bytes.
    heads = S.write_text("bad_heads.yaml", "model:\n  family: gpt\n  vocab: 512\n"
                         "  seq_len: 64\n  hidden: 64\n  heads: 5\n  layers: 2\n")
    compile_("spec: heads does not divide hidden", heads, existing,
             [re.compile(r"bad_heads\.yaml:6:\d+: error"), "heads", "hidden"])
    key = S.write_text("bad_key.yaml", "model:\n  family: mlp\n  vocabb: 256\n"
                       "  seq_len: 32\n  hidden: 64\n  layers: 2\n")
    compile_("spec: misspelt key", key, existing,
             ["bad_key.yaml:3:3: error", "vocabb", "did you mean 'vocab'"])
    opt = S.write_text("bad_opt.yaml", "model: {family: mlp, vocab: 256, seq_len: 32, "
                       "hidden: 64, layers: 2}\ntraining:\n  optimizer: {kind: sgd, "
                       "betas: [0.9, 0.99]}\n")
    compile_("spec: adamw key with sgd", opt, existing,
             [re.compile(r"bad_opt\.yaml:3:\d+: error"), "betas"])
    compile_("spec file missing", "missing.yaml", existing,
             ["missing.yaml", "No such file"])
    compile_("spec is a token file", S.path("big.bin"), existing, ["big.bin"])


def main():
    fx = {}

    def do_setup():
        fx.update(setup())
        fx["ready"] = True

    S.case("setup", do_setup)
    if fx.get("ready"):
        S.case("training binary", runtime_cases, fx)
        S.case("strata compile", compile_cases, fx)
    S.finish()


if __name__ == "__main__":
    main()
