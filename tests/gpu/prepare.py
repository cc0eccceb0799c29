#!/usr/bin/python3
"""Builds the GPU check's cases here, for a GPU machine to run there.

  /usr/bin/python3 tests/gpu/prepare.py --build build --out DIR

Writes DIR/stage/ (then scripts/gpu-check.sh packs it): CUDA executables
compiled by this tree's `strata`, their --init weights and token files, the
CPU runs' logs they are compared with, the kernel test binary, the launcher's
non-system libraries, the benchmark's executables and the PyTorch peer, and
tests/gpu/run_checks.py, which runs everything there (see docs/gpu-check.md).

Cases (run_checks.py holds the bounds and says why):
  kernels      StrataCudaKernelTests: each CUDA kernel against the CPU's.
  gpt-f32      gpt, 4 layers, head dim 16: one rank CUDA vs CPU, fp32.
  f32 plans    dp2, tp2, pp2 (1f1b), dp2 ZeRO-3 on one GPU vs one rank.
  gpt-bf16     the same gpt in bf16 and a head-dim-64 gpt (seq 256): CUDA
               vs the CPU's bf16 run; graphs off vs on, bit for bit.
  llama-bf16   GQA llama (head dim 64, seq 256): CUDA vs CPU bf16.
  bf16 plans   dp2, tp2, pp2, dp2 ZeRO-3 in bf16 vs one CUDA rank.
  resume       save at step 6, resume to 10: bit-identical to one run.
  bench        GPT-2 124M bf16, micro-batch 8 x 2 and 16 x 1, seq 1024.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys

import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
REF = os.path.join(ROOT, "tests", "reference")
STEPS = 10
MPI_ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1",
               OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")

# Libraries every Linux machine has: never carried.
SYSTEM_LIBS = ("linux-vdso", "ld-linux", "libc.so", "libm.so", "libdl.so",
               "libpthread.so", "librt.so", "libstdc++.so", "libgcc_s.so")


def run(cmd, **kw):
    cmd = [str(c) for c in cmd]
    proc = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if proc.returncode != 0:
        sys.exit(f"prepare: {' '.join(cmd)} failed ({proc.returncode}):\n"
                 f"{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}")
    return proc


def gpt_spec(dtype, hidden=64, heads=4, layers=4, seq=64, batch=8, micro=2,
             family="gpt", kv_heads=None, vocab=512):
    model = {"family": family, "vocab": vocab, "seq_len": seq,
             "hidden": hidden, "heads": heads, "layers": layers,
             "dtype": dtype}
    if family == "llama":
        model.update({"kv_heads": kv_heads or heads,
                      "ffn_hidden": 704 * hidden // 256,
                      "tie_embeddings": False})
    return {
        "model": model,
        "training": {
            "global_batch": batch, "micro_batch": micro,
            "optimizer": {"kind": "adamw", "lr": 3.0e-3,
                          "betas": [0.9, 0.95], "eps": 1.0e-8,
                          "weight_decay": 0.1},
            "schedule": {"kind": "cosine", "warmup_steps": 3,
                         "total_steps": STEPS, "min_lr": 3.0e-4},
            "grad_clip": 2.0, "seed": 5}}


def pins(batch, micro=2, dp=1, tp=1, pp=1, zero=0):
    p = {"dp": dp, "tp": tp, "pp": pp, "vpp": 1, "micro_batch": micro,
         "num_microbatches": batch // (dp * micro), "schedule": "1f1b",
         "zero": zero, "recompute": "none", "sp": "false"}
    return [a for k, v in p.items() for a in ("--pin", f"{k}={v}")]


class Stage:
    def __init__(self, build, out):
        self.strata = os.path.join(build, "bin", "strata")
        self.build = build
        self.dir = os.path.join(out, "stage")
        shutil.rmtree(self.dir, ignore_errors=True)
        for sub in ("cases", "lib", "bin", "bench"):
            os.makedirs(os.path.join(self.dir, sub))
        self.manifest = {"cases": [], "bench": []}

    def path(self, *parts):
        return os.path.join(self.dir, *parts)

    def spec(self, name, spec):
        p = self.path("cases", name + ".yaml")
        with open(p, "w") as f:
            yaml.safe_dump(spec, f, sort_keys=False)
        return p

    def inputs(self, name, spec_path, num_tokens=40000):
        init = self.path("cases", name + ".init.safetensors")
        tokens = self.path("cases", name + ".tokens.bin")
        run(["/usr/bin/python3", os.path.join(REF, "make_inputs.py"),
             "--model-yaml", spec_path, "--init-out", init, "--seed", "3",
             "--tokens-out", tokens, "--num-tokens", num_tokens,
             "--pattern", "learnable"])
        return init, tokens

    def compile(self, name, spec_path, cluster, extra, where="cases"):
        """Compiles and keeps only the program: every case runs the one
        carried launcher with --program (the executables differ only in
        the program appended to it)."""
        exe = os.path.join(self.dir, "..", name + ".exe")
        run([self.strata, "compile", spec_path, "--cluster", cluster, "-o",
             exe, *extra])
        with open(exe, "rb") as f:
            data = f.read()
        offset = int.from_bytes(data[-24:-16], "little")
        length = int.from_bytes(data[-16:-8], "little")
        program = self.path(where, name + ".program")
        with open(program, "wb") as f:
            f.write(data[offset:offset + length])
        os.remove(exe)
        return os.path.basename(program)

    def cpu_log(self, name, spec_path, extra, init, tokens, env=None):
        exe = os.path.join(self.dir, "..", name + ".cpu")
        run([self.strata, "compile", spec_path, "--cluster", "local:1", "-o",
             exe, *extra])
        log = self.path("cases", name + ".cpu.jsonl")
        run([exe, "--init", init, "--data", tokens, "--steps", STEPS, "--log",
             log], env=env)
        os.remove(exe)
        return os.path.basename(log)


def carry_libraries(stage, launcher):
    ldd = run(["ldd", launcher]).stdout
    carried = []
    for line in ldd.splitlines():
        parts = line.split("=>")
        if len(parts) != 2:
            continue
        name = parts[0].strip()
        target = parts[1].split("(")[0].strip()
        if not target or any(name.startswith(s) for s in SYSTEM_LIBS):
            continue
        shutil.copy2(os.path.realpath(target), stage.path("lib", name))
        carried.append(name)
    return carried


def bf16_bound(stage, name, spec_path, extra, init, tokens):
    """The largest per-step loss difference between two valid CPU bf16
    runs: the default kernels and every kernel but matmul computing in
    float32 on staged copies (STRATA_BF16_STAGE=1), with oneDNN's bf16 GEMM
    off (STRATA_BF16_GEMM=0: widened float32 GEMMs)."""
    base = stage.cpu_log(name, spec_path, extra, init, tokens)
    alt_env = dict(os.environ, STRATA_BF16_STAGE="1", STRATA_BF16_GEMM="0")
    alt = stage.cpu_log(name + ".alt", spec_path, extra, init, tokens,
                        env=alt_env)
    worst = {"loss": 0.0, "grad_norm": 0.0}
    with open(stage.path("cases", base)) as a, \
            open(stage.path("cases", alt)) as b:
        for la, lb in zip(a, b):
            ra, rb = json.loads(la), json.loads(lb)
            if "step" in ra:
                for f in worst:
                    worst[f] = max(worst[f], abs(ra[f] - rb[f]) /
                                   max(abs(ra[f]), abs(rb[f])))
    return base, worst


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    st = Stage(os.path.abspath(args.build), os.path.abspath(args.out))
    m = st.manifest
    m["libs"] = carry_libraries(
        st, os.path.join(st.build, "bin", "strata-launcher"))
    for binary in ("StrataCudaKernelTests", "strata-launcher",
                   "strata-calibrate-probe"):
        shutil.copy2(os.path.join(st.build, "bin", binary), st.path("bin"))
    for f in ("run_checks.py",):
        shutil.copy2(os.path.join(HERE, f), st.path(f))
    shutil.copy2(os.path.join(ROOT, "bench", "gpu", "torch_gpt2.py"),
                 st.path("bench"))
    shutil.copy2(os.path.join(REF, "compare_losses.py"), st.path("bin"))

    # fp32: the gpu_equivalence suite's gpt and plans.
    for dtype in ("float32", "bfloat16"):
        short = "f32" if dtype == "float32" else "bf16"
        name = f"gpt-{short}"
        spec = st.spec(name, gpt_spec(dtype))
        init, tokens = st.inputs(name, spec)
        base = pins(8)
        case = {"name": name, "exe": st.compile(name, spec, "h100:1", base),
                "init": os.path.basename(init),
                "tokens": os.path.basename(tokens), "dtype": dtype,
                "plans": []}
        if dtype == "float32":
            case["cpu_log"] = st.cpu_log(name, spec, base, init, tokens)
        else:
            case["cpu_log"], case["cpu_bf16_spread"] = bf16_bound(
                st, name, spec, base, init, tokens)
            case["graphs_off"] = True
            case["resume"] = True
        for label, ranks, p in [("dp2", 2, pins(8, dp=2)),
                                ("tp2", 2, pins(8, tp=2)),
                                ("pp2-1f1b", 2, pins(8, pp=2)),
                                ("dp2-zero3", 2, pins(8, dp=2, zero=3))]:
            case["plans"].append(
                {"label": label, "ranks": ranks,
                 "exe": st.compile(f"{name}-{label}", spec, f"h100:{ranks}",
                                   p)})
        m["cases"].append(case)

    # bf16 at the shapes the tensor-core attention is built for.
    for name, spec_dict in [
            ("gpt-d64-bf16", gpt_spec("bfloat16", hidden=256, heads=4,
                                      layers=2, seq=256, vocab=1024)),
            ("llama-gqa-bf16", gpt_spec("bfloat16", hidden=256, heads=4,
                                        layers=2, seq=256, vocab=1024,
                                        family="llama", kv_heads=2))]:
        spec = st.spec(name, spec_dict)
        init, tokens = st.inputs(name, spec, num_tokens=200000)
        base = pins(8)
        log, spread = bf16_bound(st, name, spec, base, init, tokens)
        m["cases"].append({
            "name": name, "exe": st.compile(name, spec, "h100:1", base),
            "init": os.path.basename(init), "tokens": os.path.basename(tokens),
            "dtype": "bfloat16", "cpu_log": log, "cpu_bf16_spread": spread,
            "plans": []})

    # The benchmark: GPT-2 124M bf16, the h200-single-gpu.csv shapes.
    gpt2 = yaml.safe_load(open(os.path.join(ROOT, "examples", "models",
                                            "gpt2-small.yaml")))
    gpt2["model"]["dtype"] = "bfloat16"
    gpt2["training"]["global_batch"] = 16
    gpt2["training"]["schedule"] = {"kind": "constant"}
    for micro in (8, 16):
        gpt2["training"]["micro_batch"] = micro
        name = f"gpt2-bf16-mb{micro}"
        spec = st.spec(name, gpt2)
        exe = st.compile(name, spec, "h100:1",
                         ["--pin", f"micro_batch={micro}"], where="bench")
        # nanoGPT's MFU count, as bench/gpu/torch_gpt2.py uses it.
        md = gpt2["model"]
        d, L, V, T = md["hidden"], md["layers"], md["vocab"], md["seq_len"]
        per_layer = 4 * d + (3 * d * d + 3 * d) + (d * d + d) + \
            2 * (4 * d * d) + 4 * d + d
        params = V * d + L * per_layer + 2 * d  # without the position table
        m["bench"].append({"name": name, "exe": exe, "micro_batch": micro,
                           "grad_accum": 16 // micro, "seq": T,
                           "flops_per_token": 6 * params + 12 * L * d * T})
    tokens = st.path("bench", "gpt2.tokens.bin")
    run(["/usr/bin/python3", "-c",
         "import numpy as np; np.random.default_rng(0).integers(0, 50257, "
         f"size=2_000_000, dtype=np.uint16).tofile('{tokens}')"])
    with open(st.path("manifest.json"), "w") as f:
        json.dump(m, f, indent=1)
    print(f"prepare: {len(m['cases'])} cases, {len(m['bench'])} benchmark "
          f"executables, {len(m['libs'])} carried libraries in {st.dir}")


if __name__ == "__main__":
    main()
