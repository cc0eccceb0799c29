#!/usr/bin/python3
"""`strata compile --target` and the CUDA executable on a machine without a
GPU (runs everywhere; the GPU runs are gpu_equivalence.py's).

  - the target follows the cluster: cuda for h100:N / a100:N / dgx-*, cpu
    for local:N; --target cpu with a GPU cluster, --target cuda with CPU
    ranks, and an unknown target are errors that name the flag;
  - `BIN --info` names the target, the device model and the cluster;
  - gpt2-small compiles for the cuda target (the acceptance command, with
    one H100 instead of a DGX node to keep the test short);
  - the launcher needs no CUDA library to start: `ldd` lists none of
    libcuda, libcudart, libcublas(Lt), libnccl (they are loaded at run
    time);
  - where no CUDA program can run (no driver, no GPU, a runtime built
    without CUDA), the executable says why and exits non-zero; where one
    can, a one-step run succeeds.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from e2e_common import Session  # noqa: E402

S = Session(__doc__)
TINY = os.path.join(S.examples, "gpt-tiny.yaml")


def compile_argv(cluster, out, *extra):
    return [S.strata, "compile", TINY, "--cluster", cluster, "-o", S.path(out),
            *extra]


def targets():
    for cluster, target, model in [("h100:1", "cuda", "H100-SXM5-80GB"),
                                   ("a100:2", "cuda", "A100-SXM4-80GB"),
                                   ("local:1", "cpu", "cpu-rank")]:
        out = f"tiny-{cluster.replace(':', '')}"
        proc = S.run(compile_argv(cluster, out))
        S.check(f"target: {target} on {model}" in proc.stdout,
                f"--cluster {cluster} compiles for {target} on {model}",
                proc.stdout)
        info = S.run([S.path(out), "--info"]).stdout
        want = f"target: {target}, device model {model} (planned for {cluster})"
        S.check(want in info, f"--info of the {cluster} program says '{want}'",
                info)


def mismatches():
    for cluster, target, words in [
            ("h100:1", "cpu", ["--target cpu", "cluster of GPUs", "--target cuda"]),
            ("local:1", "cuda", ["--target cuda", "cluster of CPU ranks",
                                 "--target cpu"]),
            ("local:1", "tpu", ["--target tpu", "expected cpu or cuda"])]:
        proc = S.run(compile_argv(cluster, "bad", "--target", target),
                     expect_ok=False)
        S.check(proc.returncode != 0 and all(w in proc.stderr for w in words),
                f"--target {target} with --cluster {cluster} is an error "
                f"naming the flag", proc.stderr)
    proc = S.run(compile_argv("h100:9", "bad"), expect_ok=False)
    S.check(proc.returncode != 0 and "at most 8 GPUs" in proc.stderr,
            "h100:9 is refused (one NVLink domain)", proc.stderr)


def gpt2_small():
    out = S.path("gpt2")
    proc = S.run([S.strata, "compile", os.path.join(S.examples, "gpt2-small.yaml"),
                  "--cluster", "h100:1", "-o", out], timeout=300)
    S.check("target: cuda on H100-SXM5-80GB" in proc.stdout,
            "gpt2-small compiles for the cuda target on an H100", proc.stdout)
    info = S.run([out, "--info"]).stdout
    S.check("target: cuda" in info, "its --info says target: cuda", info)


def without_gpu():
    binary = S.path("tiny-h1001")
    proc = S.run([binary, "--steps", "1"], expect_ok=False)
    if proc.returncode == 0:
        S.check(True, "a one-step CUDA run succeeded (this machine has a GPU)")
        return
    msg = proc.stderr
    S.check("compiled for the cuda target" in msg and "cannot run here" in msg
            and "--target cpu" in msg,
            "without a GPU the CUDA executable says why it cannot run", msg)
    S.check("Traceback" not in msg and "terminate called" not in msg,
            "and fails cleanly", msg)
    cpu = S.run([S.path("tiny-local1"), "--steps", "1"])
    S.check(cpu.returncode == 0, "the CPU executable of the same model runs")


def one_artifact():
    launcher = os.path.join(os.path.dirname(S.strata), "strata-launcher")
    libs = S.run(["ldd", launcher]).stdout
    linked = [name for name in ("libcuda.", "libcudart", "libcublas", "libnccl")
              if name in libs]
    S.check(not linked, "the launcher links no CUDA library dynamically",
            f"ldd lists {linked}:\n{libs}")


S.case("targets follow the cluster", targets)
S.case("one artifact", one_artifact)
S.case("target mismatches", mismatches)
S.case("gpt2-small for cuda", gpt2_small)
S.case("a CUDA program where none can run", without_gpu)
S.finish()
