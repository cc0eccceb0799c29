#!/usr/bin/env python3
"""Runs the GPU check on a GPU machine, from the unpacked archive.

  python3 run_checks.py [--out DIR] [--peer none|eager|compile|both]
                        [--only kernels,cases,plans,bench,profile]

Needs: an NVIDIA GPU and driver, CUDA 13's cuBLASLt (found through
/usr/local/cuda or STRATA_CUDA_LIBRARY_PATH; Python environments' nvidia/*/lib
folders are added automatically), python3 with numpy (and torch for the
peer), and mpirun for the multi-rank plans (skipped, saying so, without
one). Prints one table last; writes every log under --out.

Bounds:
  fp32 CUDA vs CPU: 1e-4 relative per step (loss, grad_norm), the fp32
    contract (cuBLASLt without TF32; reductions in another order).
  bf16 CUDA vs CPU bf16: prepare.py measured, on the CPU, how far two valid
    bf16 runs of the same case drift apart per step (bf16 kernel forms vs
    float32 kernels on staged copies, oneDNN's bf16 GEMM vs widened
    float32 GEMMs), for the loss and the gradient norm: the spread (bf16
    training at these learning rates is chaotic: the CPU's two variants
    differ by up to 5% in grad_norm by step 5). The CUDA run rounds
    differently again (cuBLASLt's accumulation order, P and dS rounded to
    bf16 inside the tensor-core attention, GELU and bias in the GEMM
    epilogue before rounding), so it may differ by 3x that spread (never
    less than 2e-3 for the loss, 1e-2 for the gradient norm); fused vs
    unfused CUDA likewise.
  plans on one GPU vs one CUDA rank: fp32 1e-4; bf16 with fusion off on
    both sides (the same kernels) 1e-3 for the loss and the gradient norm,
    5e-3 for tp's gradient norm (the CPU bf16 suite's bounds); bf16 fused
    at the bounds above (a stage or shard fuses what its part allows).
  graphs on vs off, resume vs one run: bit for bit.
"""

import argparse
import glob
import json
import os
import shutil
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROWS = []


def row(group, name, ok, detail):
    ROWS.append((group, name, "PASS" if ok is True else
                 ("SKIP" if ok is None else "FAIL"), detail))
    print(f"[{ROWS[-1][2]}] {group} {name}: {detail}", flush=True)


def setup_env():
    env = dict(os.environ)
    # Carried libraries only where the machine lacks them (its own MPI wins).
    have = subprocess.run(["ldconfig", "-p"], capture_output=True,
                          text=True).stdout
    missing = os.path.join(HERE, "lib-missing")
    shutil.rmtree(missing, ignore_errors=True)
    os.makedirs(missing)
    linked = []
    for lib in sorted(os.listdir(os.path.join(HERE, "lib"))):
        if f"{lib} " not in have:
            os.symlink(os.path.join(HERE, "lib", lib),
                       os.path.join(missing, lib))
            linked.append(lib)
    env["LD_LIBRARY_PATH"] = ":".join(
        p for p in [env.get("LD_LIBRARY_PATH", ""), missing] if p)
    # CUDA libraries inside Python environments (cuDNN, NCCL live there).
    dirs = []
    for site in sys.path:
        dirs += sorted(glob.glob(os.path.join(site, "nvidia", "*", "lib")))
    extra = [d for d in [env.get("STRATA_CUDA_LIBRARY_PATH", "")] + dirs if d]
    env["STRATA_CUDA_LIBRARY_PATH"] = ":".join(extra)
    env["OMPI_ALLOW_RUN_AS_ROOT"] = "1"
    env["OMPI_ALLOW_RUN_AS_ROOT_CONFIRM"] = "1"
    return env, linked


def sh(cmd, env, timeout=300, log=None):
    t0 = time.time()
    try:
        p = subprocess.run([str(c) for c in cmd], env=env, capture_output=True,
                           text=True, timeout=timeout)
        out, rc = p.stdout + p.stderr, p.returncode
    except subprocess.TimeoutExpired as e:
        out = (e.stdout or b"").decode(errors="replace") + \
            (e.stderr or b"").decode(errors="replace")
        rc = -9
    if log:
        with open(log, "w") as f:
            f.write(out)
    return rc, out, time.time() - t0


def read_log(path):
    steps = {}
    if not os.path.exists(path):
        return steps
    for line in open(path):
        line = line.strip()
        if line:
            r = json.loads(line)
            if "step" in r:
                steps[r["step"]] = r
    return steps


def worst_rel(a, b, field):
    common = sorted(set(a) & set(b))
    if not common or set(a) != set(b):
        return float("inf"), common
    w = 0.0
    for s in common:
        x, y = a[s][field], b[s][field]
        if x != x or y != y:
            return float("inf"), common
        w = max(w, abs(x - y) / max(abs(x), abs(y), 1e-30))
    return w, common


def launch(args_, case, prog, log, env, steps=10, extra=(), ranks=1,
           init=True):
    cases = os.path.join(HERE, "cases")
    cmd = [os.path.join(HERE, "bin", "strata-launcher"), "--program",
           os.path.join(cases, prog),
           *(["--init", os.path.join(cases, case["init"])] if init else []),
           "--data", os.path.join(cases, case["tokens"]), "--steps", steps,
           "--log", log, *extra]
    if ranks > 1:
        cmd = ["mpirun", "--oversubscribe", "--allow-run-as-root", "-np",
               ranks, "-x", "STRATA_COMM=mpi", "-x", "LD_LIBRARY_PATH", "-x",
               "STRATA_CUDA_LIBRARY_PATH", *cmd]
    return sh(cmd, env, log=log + ".out")


def check_kernels(out, env):
    rc, text, secs = sh([os.path.join(HERE, "bin", "StrataCudaKernelTests"),
                         f"--gtest_output=json:{out}/kernels.json"], env,
                        log=f"{out}/kernels.txt")
    try:
        rep = json.load(open(f"{out}/kernels.json"))
        for suite in rep["testsuites"]:
            for t in suite["testsuite"]:
                fails = t.get("failures", [])
                skipped = t.get("result") == "SKIPPED"
                msg = "; ".join(f["failure"].splitlines()[0] + " " +
                                " ".join(f["failure"].splitlines()[1:3])
                                for f in fails)[:300]
                row("kernels", f"{suite['name']}.{t['name']}",
                    None if skipped else not fails, msg or f"{t['time']}")
    except Exception as e:  # noqa: BLE001
        row("kernels", "StrataCudaKernelTests", False,
            f"rc {rc}: {e}; {text[-400:]}")


def check_cases(out, env, manifest, do_plans):
    have_mpi = shutil.which("mpirun") is not None
    for case in manifest["cases"]:
        name, bf16 = case["name"], case["dtype"] == "bfloat16"
        cpu = read_log(os.path.join(HERE, "cases", case["cpu_log"]))
        one = f"{out}/{name}.cuda.jsonl"
        rc, text, secs = launch(None, case, case["exe"], one, env)
        got = read_log(one)
        if rc != 0 or not got:
            row(name, "one rank vs CPU", False,
                f"rc {rc}: {text.strip()[-500:]}")
            continue
        spread = case.get("cpu_bf16_spread") or {}
        bounds = {"loss": max(3 * spread.get("loss", 0), 2e-3),
                  "grad_norm": max(3 * spread.get("grad_norm", 0), 1e-2)}
        if bf16:
            wl, _ = worst_rel(got, cpu, "loss")
            wg, _ = worst_rel(got, cpu, "grad_norm")
            row(name, "one rank vs CPU bf16",
                wl <= bounds["loss"] and wg <= bounds["grad_norm"],
                f"loss {wl:.2e} (<= {bounds['loss']:.2e}), grad_norm "
                f"{wg:.2e} (<= {bounds['grad_norm']:.2e}); bounds: 3 x the "
                f"CPU's own bf16 spread; final loss "
                f"{got[max(got)]['loss']:.4f} vs {cpu[max(cpu)]['loss']:.4f}")
        else:
            wl, _ = worst_rel(got, cpu, "loss")
            wg, _ = worst_rel(got, cpu, "grad_norm")
            row(name, "one rank vs CPU", wl <= 1e-4 and wg <= 1e-4,
                f"loss {wl:.2e}, grad_norm {wg:.2e} (bound 1e-4)")
        if case.get("graphs_off"):
            off = f"{out}/{name}.nographs.jsonl"
            e2 = dict(env, STRATA_CUDA_GRAPHS="0")
            rc, text, _ = launch(None, case, case["exe"], off, e2)
            g = read_log(off)
            same = rc == 0 and all(
                g.get(s, {}).get(f) == got[s][f] for s in got
                for f in ("loss", "grad_norm"))
            row(name, "graphs off == on (bitwise)", same,
                "identical" if same else f"rc {rc} {text.strip()[-300:]}")
            e3 = dict(env, STRATA_CUDA_FUSE="0")
            nofuse = f"{out}/{name}.nofuse.jsonl"
            rc, text, _ = launch(None, case, case["exe"], nofuse, e3)
            nf = read_log(nofuse)
            wl, _ = worst_rel(nf, got, "loss")
            wg, _ = worst_rel(nf, got, "grad_norm")
            row(name, "unfused vs fused",
                rc == 0 and wl <= bounds["loss"] and
                wg <= bounds["grad_norm"],
                f"loss {wl:.2e}, grad_norm {wg:.2e}" if rc == 0
                else text.strip()[-300:])
        if case.get("resume"):
            run_dir = f"{out}/{name}.run"
            shutil.rmtree(run_dir, ignore_errors=True)
            first = f"{out}/{name}.first.jsonl"
            rc1, t1, _ = launch(None, case, case["exe"], first, env, steps=6,
                                extra=["--save", run_dir, "--save-every", 6])
            second = f"{out}/{name}.resumed.jsonl"
            rc2, t2, _ = launch(None, case, case["exe"], second, env,
                                steps=10, extra=["--resume", run_dir],
                                init=False)
            r = read_log(second)
            same = rc1 == 0 and rc2 == 0 and sorted(r) == [7, 8, 9, 10] and \
                all(r[s]["loss"] == got[s]["loss"] and
                    r[s]["grad_norm"] == got[s]["grad_norm"] for s in r)
            row(name, "resume at 6 == one run (bitwise)", same,
                "steps 7-10 identical" if same else
                f"rc {rc1}/{rc2} steps {sorted(r)} {(t1 + t2).strip()[-300:]}")
        if not do_plans or not case["plans"]:
            continue
        # The parallel plans run the same kernels as one rank only unfused
        # (a pipeline stage or a tp shard fuses what its part of the program
        # allows): unfused plans vs unfused one rank at the CPU suite's
        # bounds; fused plans vs fused one rank at the bf16 bounds above.
        unfused_env = dict(env, STRATA_CUDA_FUSE="0")
        base_unfused = got
        if bf16:
            one_nf = f"{out}/{name}.cuda-nofuse.jsonl"
            launch(None, case, case["exe"], one_nf, unfused_env)
            base_unfused = read_log(one_nf)
        for plan in case["plans"]:
            if not have_mpi:
                row(name, plan["label"], None, "no mpirun on this machine")
                continue
            variants = [("", env, got)]
            if bf16:
                variants = [(" unfused", unfused_env, base_unfused),
                            (" fused", env, got)]
            for tag, venv, base in variants:
                log = f"{out}/{name}.{plan['label']}{tag.strip()}.jsonl"
                rc, text, secs = launch(None, case, plan["exe"], log, venv,
                                        ranks=plan["ranks"])
                p = read_log(log)
                if rc != 0 or not p:
                    row(name, plan["label"] + tag, False,
                        f"rc {rc}: {text.strip()[-400:]}")
                    continue
                if not bf16:
                    lt = gt = 1e-4
                elif tag == " unfused":
                    lt, gt = 1e-3, 5e-3 if "tp" in plan["label"] else 1e-3
                else:
                    lt, gt = bounds["loss"], bounds["grad_norm"]
                wl, _ = worst_rel(p, base, "loss")
                wg, _ = worst_rel(p, base, "grad_norm")
                row(name, f"{plan['label']}{tag} vs one rank",
                    wl <= lt and wg <= gt,
                    f"loss {wl:.2e} (<= {lt:.1e}), grad_norm {wg:.2e} "
                    f"(<= {gt:.1e})")


def bench(out, env, manifest, peer, steps=12):
    results = []
    tokens = os.path.join(HERE, "bench", "gpt2.tokens.bin")
    for b in manifest["bench"]:
        log = f"{out}/{b['name']}.jsonl"
        cmd = [os.path.join(HERE, "bin", "strata-launcher"), "--program",
               os.path.join(HERE, "bench", b["exe"]), "--data", tokens,
               "--steps", steps, "--log", log]
        rc, text, secs = sh(cmd, env, log=log + ".out")
        r = read_log(log)
        if rc != 0 or len(r) < 4:
            row("bench", b["name"], False, f"rc {rc}: {text.strip()[-400:]}")
            continue
        tps = statistics.median(r[s]["tokens_per_s"] for s in sorted(r)[2:])
        ms = statistics.median(r[s]["step_time_s"] for s in sorted(r)[2:])
        mfu = tps * b["flops_per_token"] / 989.5e12  # nanoGPT's count
        results.append(("Strata bf16 (CUDA)", b["micro_batch"],
                        b["grad_accum"], tps, ms * 1e3, mfu))
        row("bench", b["name"], True,
            f"{tps:,.0f} tokens/s, {ms * 1e3:.2f} ms/step, "
            f"loss {r[max(r)]['loss']:.3f}")
    modes = {"none": [], "eager": ["eager"], "compile": ["compile"],
             "both": ["eager", "compile"]}[peer]
    for mode in modes:
        for b in manifest["bench"]:
            cmd = [sys.executable, os.path.join(HERE, "bench", "torch_gpt2.py"),
                   "--mode", mode, "--micro-batch", b["micro_batch"],
                   "--grad-accum", b["grad_accum"], "--steps", steps]
            rc, text, secs = sh(cmd, env, timeout=400,
                                log=f"{out}/torch-{mode}-{b['micro_batch']}.txt")
            line = [l for l in text.splitlines() if l.startswith("RESULT ")]
            if rc != 0 or not line:
                row("bench", f"torch {mode} mb{b['micro_batch']}", False,
                    f"rc {rc}: {text.strip()[-300:]}")
                continue
            r = json.loads(line[-1][7:])
            results.append((f"PyTorch bf16 {mode}", b["micro_batch"],
                            b["grad_accum"], r["tokens_per_s"],
                            r["step_ms"], r["mfu"]))
            row("bench", f"torch {mode} mb{b['micro_batch']}", True,
                f"{r['tokens_per_s']:,.0f} tokens/s")
    return results


def profile(out, env, manifest):
    b = manifest["bench"][0]
    cmd = [os.path.join(HERE, "bin", "strata-launcher"), "--program",
           os.path.join(HERE, "bench", b["exe"]), "--data",
           os.path.join(HERE, "bench", "gpt2.tokens.bin"), "--steps", 3]
    rc, text, _ = sh(cmd, dict(env, STRATA_PROFILE="1"),
                     log=f"{out}/profile.txt")
    row("profile", b["name"], rc == 0, f"{out}/profile.txt")
    lines = [l for l in text.splitlines() if "STRATA_PROFILE" in l]
    if lines:
        i = text.splitlines().index(lines[0])
        print("\n".join(text.splitlines()[i:i + 28]))


def probe(out, env):
    """`strata-calibrate-probe --gpu`: the GPU's rates as the planner reads
    them (`strata calibrate --probe-json` turns the JSON into a spec)."""
    rc, text, secs = sh([os.path.join(HERE, "bin", "strata-calibrate-probe"),
                         "--gpu"], env, log=f"{out}/gpu-probe.txt")
    try:
        m = json.loads(text[text.index("{"):])
        with open(f"{out}/gpu-probe.json", "w") as f:
            json.dump(m, f, indent=1)
        row("probe", "strata-calibrate-probe --gpu", True,
            f"bf16 GEMM fit {m['gemm']['fit_peak_flops_per_s'] / 1e12:.0f} "
            f"TFLOP/s (Khalf {m['gemm']['fit_depth_half']:.0f}), kernels "
            f"{m['memory']['bytes_per_s'] / 1e9:.0f} GB/s, attention "
            f"{m['attention']['forward_fraction']:.3f} / "
            f"{m['attention']['backward_fraction']:.3f} of it, "
            f"{secs:.0f} s")
    except Exception as e:  # noqa: BLE001
        row("probe", "strata-calibrate-probe --gpu", False,
            f"rc {rc}: {e}; {text.strip()[-300:]}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.environ.get("OUT", "gpu-check-out"))
    ap.add_argument("--peer", default="eager",
                    choices=["none", "eager", "compile", "both"])
    ap.add_argument("--only",
                    default="kernels,cases,plans,bench,profile,probe")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    only = set(a.only.split(","))
    manifest = json.load(open(os.path.join(HERE, "manifest.json")))
    env, linked = setup_env()
    try:
        smi = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version",
                              "--format=csv,noheader"], capture_output=True,
                             text=True).stdout.strip()
    except OSError:
        smi = "no nvidia-smi"
    print(f"GPU: {smi}; carried libraries used: {', '.join(linked) or 'none'}"
          f"; mpirun: {shutil.which('mpirun')}", flush=True)
    t0 = time.time()
    if "kernels" in only:
        check_kernels(a.out, env)
    if "cases" in only:
        check_cases(a.out, env, manifest, "plans" in only)
    results = bench(a.out, env, manifest, a.peer) if "bench" in only else []
    if "profile" in only:
        profile(a.out, env, manifest)
    if "probe" in only:
        probe(a.out, env)
    print(f"\n=== GPU check ({time.time() - t0:.0f} s) on {smi} ===")
    for g, n, status, d in ROWS:
        print(f"{status:4} {g:16} {n:44} {d[:160]}")
    if results:
        print("\n| run | micro-batch x accum | tokens/s | ms/step | MFU |")
        print("|---|---|---|---|---|")
        for name, mb, ga, tps, ms, mfu in results:
            print(f"| {name} | {mb} x {ga} | {tps:,.0f} | {ms:.2f} | "
                  f"{100 * mfu:.1f}% |")
    fails = sum(1 for r in ROWS if r[2] == "FAIL")
    print(f"\n{fails} failed, {sum(1 for r in ROWS if r[2] == 'PASS')} passed,"
          f" {sum(1 for r in ROWS if r[2] == 'SKIP')} skipped")
    sys.exit(1 if fails else 0)


if __name__ == "__main__":
    main()
