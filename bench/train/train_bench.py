#!/usr/bin/python3
"""Single-core training throughput: Strata beside PyTorch, same model, data,
initial weights and batch, in one run.

  /usr/bin/python3 bench/train/train_bench.py [--strata build/bin/strata]
      [--launcher PATH] [--models tiny,gpt2-width] [--rounds 2]
      [--peers openblas,system] [--openblas-dir DIR] [--markdown]

For each model: `strata compile MODEL --cluster local:1`, one token file and
one initial-weights file (tests/reference/make_inputs.py), then, --rounds
times, Strata and each fast PyTorch peer one after the other (never
concurrently), each with one thread (--threads 1, OMP_NUM_THREADS=1,
OPENBLAS_NUM_THREADS=1). Strata's time is the sum of the JSONL step_time_s of
the steps after the warm-up ones; PyTorch's is bench/peers/
torch_train_bench.py's own timing of the same steps. Tokens/s = tokens of
the timed steps / their seconds over all rounds; GFLOP/s uses one formula for
both (bench/peers/peer_common.py: per token 6 P_matmul + 12 L H S).

PyTorch peers differ only in the BLAS that torch's CPU matmuls call:
  system    the libblas.so.3 the system resolves (Debian's torch 1.13 is built
            with BLAS_INFO=generic; here that is netlib's reference BLAS,
            ~1 GFLOP/s). So slow that it runs once, after the rounds, with
            --slow-steps timed steps.
  openblas  OpenBLAS's libblas.so.3 put first on LD_LIBRARY_PATH for the
            peer only (--openblas-dir, default: Debian's openblas-pthread
            directory when libopenblas0-pthread is installed). Skipped with a
            note when no such directory exists.
"""

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(REPO, "bench", "peers"))
import peer_common as pc  # noqa: E402

# name -> (spec, warm-up steps, timed steps per round). The GPT-2-width model
# is GPT-2 small's width with 2 layers, 256-token sequences and 4 sequences
# a step (1,024 tokens): one step is ~330 GFLOP, a few seconds on one core.
MODELS = {
    "tiny": (os.path.join(REPO, "examples", "models", "gpt-tiny.yaml"), 5, 40),
    "gpt2-width": (os.path.join(HERE, "gpt2-width.yaml"), 1, 3),
}
OPENBLAS_DIRS = ["/usr/lib/x86_64-linux-gnu/openblas-pthread",
                 "/usr/lib/x86_64-linux-gnu/openblas-openmp",
                 "/usr/lib/x86_64-linux-gnu/openblas-serial"]
ONE_THREAD = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


class BenchError(Exception):
    pass


def run(cmd, env=None, what=None, with_stderr=False):
    proc = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if proc.returncode != 0:
        raise BenchError(f"{what or cmd[0]} failed (exit {proc.returncode}):\n  {' '.join(cmd)}\n"
                         f"{proc.stdout[-2000:]}{proc.stderr[-2000:]}")
    return proc.stdout + proc.stderr if with_stderr else proc.stdout


def peer_env(blas_dir):
    env = dict(os.environ, **ONE_THREAD)
    if blas_dir:
        env["LD_LIBRARY_PATH"] = blas_dir + (":" + env["LD_LIBRARY_PATH"] if env.get("LD_LIBRARY_PATH") else "")
    return env


def blas_name(env):
    """The BLAS library torch maps under `env`, as a short name."""
    probe = ("import torch\ntorch.ones(2, 2) @ torch.ones(2, 2)\n"
             "libs = {l.split()[-1] for l in open('/proc/self/maps') if 'blas' in l.split()[-1]}\n"
             "print('\\n'.join(sorted(libs)))\n")
    out = run(["/usr/bin/python3", "-c", probe], env=env, what="the torch BLAS probe")
    libs = [os.path.realpath(l) for l in out.split()]
    for lib in libs:
        m = re.search(r"libopenblas\w*-r([\d.]+)\.so", lib)
        if m:
            return f"OpenBLAS {m.group(1).rstrip('.')}"
    for lib in libs:
        if re.search(r"/blas/libblas\.so", lib):
            return "netlib reference BLAS"
    return ", ".join(os.path.basename(l) for l in libs) or "unknown BLAS"


def run_strata(binary, data, init, warmup, steps, workdir):
    log = os.path.join(workdir, "strata.jsonl")
    if os.path.exists(log):
        os.remove(log)
    run([binary, "--steps", str(warmup + steps), "--data", data, "--init", init,
         "--threads", "1", "--log", log, "--print-every", "1000000"],
        env=dict(os.environ, **ONE_THREAD), what="the Strata training binary")
    with open(log) as f:
        records = [json.loads(line) for line in f if line.strip()]
    if len(records) != warmup + steps:
        raise BenchError(f"{log}: expected {warmup + steps} step records, got {len(records)}")
    timed = records[warmup:]
    return {"seconds": sum(r["step_time_s"] for r in timed), "tokens": sum(r["tokens"] for r in timed),
            "first_loss": records[0]["loss"], "last_loss": records[-1]["loss"]}


def run_torch(spec, data, init, warmup, steps, blas_dir):
    out = run(["/usr/bin/python3", os.path.join(REPO, "bench", "peers", "torch_train_bench.py"),
               "--model-yaml", spec, "--data", data, "--init", init, "--threads", "1",
               "--warmup", str(warmup), "--steps", str(steps)],
              env=peer_env(blas_dir), what="the PyTorch peer")
    r = json.loads(out.strip().splitlines()[-1])
    return {"seconds": r["seconds"], "tokens": r["global_batch"] * r["seq_len"] * r["steps"],
            "first_loss": r["first_loss"], "last_loss": r["last_loss"]}


class Totals:
    def __init__(self):
        self.seconds, self.tokens, self.rounds = 0.0, 0, []

    def add(self, r):
        self.seconds += r["seconds"]
        self.tokens += r["tokens"]
        self.rounds.append(r["tokens"] / r["seconds"])

    def tokens_per_s(self):
        return self.tokens / self.seconds if self.seconds else float("nan")


def build_inputs(args, spec, mdir, n_tokens):
    """`strata compile SPEC --cluster local:1` and make_inputs.py's token
    file and initial weights, in `mdir`; -> (binary, data, init)."""
    os.makedirs(mdir, exist_ok=True)
    binary, data, init = (os.path.join(mdir, f) for f in ("train", "tokens.bin", "init.safetensors"))
    cmd = [args.strata, "compile", spec, "--cluster", "local:1", "-o", binary]
    if args.launcher:
        cmd += ["--launcher", args.launcher]
    run(cmd, what="strata compile")
    run(["/usr/bin/python3", os.path.join(REPO, "tests", "reference", "make_inputs.py"),
         "--model-yaml", spec, "--init-out", init, "--seed", "0", "--tokens-out", data,
         "--num-tokens", str(n_tokens), "--token-seed", "1"], what="make_inputs.py")
    return binary, data, init


def bench_model(name, args, peers, workdir):
    spec, warmup, steps = MODELS[name]
    warmup = args.warmup if args.warmup is not None else warmup
    steps = args.steps if args.steps is not None else steps
    m, t = pc.parse_spec(spec)
    mdir = os.path.join(workdir, name)
    n_tokens = (warmup + max(steps, args.slow_steps)) * t.global_batch * m.seq_len + 1
    binary, data, init = build_inputs(args, spec, mdir, n_tokens)
    info = run([binary, "--info"], what="the Strata training binary (--info)", with_stderr=True)
    params = re.search(r"parameters \((\d+) values\)", info)

    strata = Totals()
    peer_totals = {p: Totals() for p in peers}
    for rnd in range(args.rounds):
        strata.add(run_strata(binary, data, init, warmup, steps, mdir))
        progress(f"{name} round {rnd + 1}/{args.rounds}: strata {strata.rounds[-1]:.1f} tok/s")
        for p, info in peers.items():
            if info["slow"]:
                continue
            peer_totals[p].add(run_torch(spec, data, init, warmup, steps, info["dir"]))
            progress(f"{name} round {rnd + 1}/{args.rounds}: {info['name']} "
                     f"{peer_totals[p].rounds[-1]:.1f} tok/s")
    for p, info in peers.items():
        if info["slow"]:
            peer_totals[p].add(run_torch(spec, data, init, 0, args.slow_steps, info["dir"]))
            progress(f"{name}: {info['name']} {peer_totals[p].rounds[-1]:.2f} tok/s")

    fpt = pc.flops_per_token(m)
    rows = []
    for p, info in peers.items():
        s_tps, p_tps = strata.tokens_per_s(), peer_totals[p].tokens_per_s()
        rows.append({
            "model": name, "spec": os.path.relpath(spec, REPO),
            "params": int(params.group(1)) if params else None,
            "tokens_per_step": t.global_batch * m.seq_len, "flops_per_token": fpt,
            "peer": info["name"], "strata_tokens_per_s": s_tps,
            "strata_gflops": fpt * s_tps / 1e9, "strata_peak_pct": 100 * fpt * s_tps / 1e9 / args.peak_gflops,
            "peer_tokens_per_s": p_tps, "peer_gflops": fpt * p_tps / 1e9, "ratio": s_tps / p_tps,
            "strata_rounds": strata.rounds, "peer_rounds": peer_totals[p].rounds,
            "timed_steps": {"strata": steps * args.rounds,
                            "peer": args.slow_steps if info["slow"] else steps * args.rounds},
        })
    return rows


def progress(msg):
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def print_table(rows, peak, markdown):
    head = ["model", "params", "tokens/step", "PyTorch peer", "Strata tok/s", "Strata GFLOP/s",
            f"% of {peak:g} GFLOP/s", "PyTorch tok/s", "PyTorch GFLOP/s", "Strata / PyTorch"]
    body = [[r["model"], f"{r['params']:,}" if r["params"] else "?", str(r["tokens_per_step"]), r["peer"],
             f"{r['strata_tokens_per_s']:.1f}", f"{r['strata_gflops']:.1f}", f"{r['strata_peak_pct']:.0f}%",
             f"{r['peer_tokens_per_s']:.2f}", f"{r['peer_gflops']:.2f}", f"{r['ratio']:.2f}x"] for r in rows]
    if markdown:
        print("| " + " | ".join(head) + " |")
        print("|" + "---|" * len(head))
        for b in body:
            print("| " + " | ".join(b) + " |")
        return
    widths = [max(len(h), *(len(b[i]) for b in body)) for i, h in enumerate(head)]
    for line in [head] + body:
        print("  ".join(c.rjust(w) if i >= 4 else c.ljust(w) for i, (c, w) in enumerate(zip(line, widths))))


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--strata", default=os.path.join(REPO, "build", "bin", "strata"))
    p.add_argument("--launcher", help="strata-launcher to embed (default: the one beside --strata)")
    p.add_argument("--models", default="tiny,gpt2-width", help=f"comma list of {', '.join(MODELS)}")
    p.add_argument("--rounds", type=int, default=2, help="alternations of Strata and the fast peers")
    p.add_argument("--warmup", type=int, help="untimed steps per run (default per model)")
    p.add_argument("--steps", type=int, help="timed steps per run (default per model)")
    p.add_argument("--peers", default="openblas,system", help="comma list of openblas, system")
    p.add_argument("--openblas-dir", help="directory holding OpenBLAS's libblas.so.3")
    p.add_argument("--slow-steps", type=int, default=1,
                   help="timed steps of the system-BLAS peer (run once, no warm-up)")
    p.add_argument("--peak-gflops", type=float, default=150.0, help="one core's fp32 peak for the %% column")
    p.add_argument("--markdown", action="store_true", help="print the table as Markdown")
    p.add_argument("--json", help="also write the rows to this file")
    p.add_argument("--work-dir", help="keep binaries, data and logs here (default: a temporary directory)")
    args = p.parse_args(argv)

    models = [m for m in args.models.split(",") if m]
    for m in models:
        if m not in MODELS:
            p.error(f"--models: unknown model '{m}' (choose from {', '.join(MODELS)})")
    if args.rounds < 1 or args.slow_steps < 1 or (args.steps is not None and args.steps < 1) \
            or (args.warmup is not None and args.warmup < 0):
        p.error("--rounds, --steps and --slow-steps must be >= 1, --warmup >= 0")
    if not os.access(args.strata, os.X_OK):
        p.error(f"--strata {args.strata}: not an executable; build the `strata` and "
                "`strata-launcher` targets or pass --strata PATH")

    peers = {}
    for name in [x for x in args.peers.split(",") if x]:
        if name == "system":
            peers[name] = {"dir": None, "slow": True}
        elif name == "openblas":
            d = args.openblas_dir or next((c for c in OPENBLAS_DIRS if os.path.exists(
                os.path.join(c, "libblas.so.3"))), None)
            if not d or not os.path.exists(os.path.join(d, "libblas.so.3")):
                print("note: no OpenBLAS libblas.so.3 found (install libopenblas0-pthread or pass "
                      "--openblas-dir); skipping the OpenBLAS peer", file=sys.stderr)
                continue
            peers[name] = {"dir": d, "slow": False}
        else:
            p.error(f"--peers: unknown peer '{name}' (choose from openblas, system)")
    if not peers:
        p.error("no PyTorch peer to run")
    try:
        for info in peers.values():
            info["name"] = "torch 1.13 + " + blas_name(peer_env(info["dir"]))
        workdir = args.work_dir or tempfile.mkdtemp(prefix="strata-train-bench-")
        rows = []
        for m in models:
            rows += bench_model(m, args, peers, workdir)
    except BenchError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(f"Single-core training throughput ({time.strftime('%Y-%m-%d')}, {cpu_name()}); "
          f"rounds {args.rounds}, one thread each, run one after the other")
    print_table(rows, args.peak_gflops, args.markdown)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


def cpu_name():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown CPU"


if __name__ == "__main__":
    sys.exit(main())
