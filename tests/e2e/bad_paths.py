#!/usr/bin/python3
"""Paths of the wrong kind given to the training binary's file flags and to
`strata compile`: a directory where a file is expected (and the reverse), or
an output whose parent directory does not exist. Each must fail with exit 1
and a message naming the flag or the path, without a raw exception text, and
leave the disk as it was (no stray temporary files): the same contract as
bad_inputs.py, for the paths rather than the contents.
"""

import os
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from e2e_common import latest, Session, expect_error  # noqa: E402

S = Session(__doc__)


def cases():
    gpt_spec = os.path.join(S.examples, "gpt-tiny.yaml")
    gpt = S.compile(gpt_spec, "gpt")
    ckpt = S.path("good.ckpt")
    S.run([gpt, "--steps", 2, "--save", ckpt])
    os.mkdir(S.path("adir"))
    S.write_text(os.path.join("adir", "inside.txt"), "user data\n")
    # A checkpoint whose model.safetensors is a directory.
    odd_ckpt = S.path("odd.ckpt")
    shutil.copytree(latest(ckpt), odd_ckpt)
    os.remove(os.path.join(odd_ckpt, "model.safetensors"))
    os.mkdir(os.path.join(odd_ckpt, "model.safetensors"))

    def run(label, args, needles):
        expect_error(S, label, [gpt, "--steps", 2, *args], needles)

    run("--data names a directory", ["--data", "adir"], ["--data", "adir"])
    run("--init names a directory", ["--init", "adir"], ["adir"])
    run("--resume whose model.safetensors is a directory", ["--resume", "odd.ckpt"],
        ["odd.ckpt/model.safetensors"])
    run("--log names an existing directory", ["--log", "adir"], ["--log", "adir"])
    run("--log in a missing directory", ["--log", "nodir/log.jsonl"],
        ["--log", "nodir/log.jsonl"])
    run("--save in a missing directory", ["--save", "nodir/ck"], ["--save", "nodir/ck"])
    expect_error(S, "compile: the spec is a directory",
                 [S.strata, "compile", "adir", "--cluster", "local:1", "-o", "out"],
                 ["adir", "directory"])


S.case("paths", cases)
S.finish()
