#!/usr/bin/python3
"""Predicted vs measured step time of compiled plans on local MPI ranks.

  /usr/bin/python3 bench/ddp/predicted_vs_measured.py [--build build] \
      [--calibrate-build DIR] [--steps 8] [--warmup 3] [--quick-calibrate] \
      [--calibrated DIR] [--work DIR] [--only TEXT]

1. Calibrates this machine once: `strata calibrate --ranks 2` writes
   WORK/cal-2.yaml (and the probe's raw JSON). The one-rank spec WORK/cal-1.yaml
   is the same file with a topology of one device: per-rank numbers are
   measured with both ranks busy, which is also how a one-rank run on this
   two-core machine shares it with nothing but the system.
2. For every plan below: `strata compile --cluster local:N --pin ...`, runs
   warmup + steps steps under mpirun, takes the median step_time_s of the
   timed steps (the slowest rank's, as the runtime logs it).
3. Asks `strata plan --cluster WORK/cal-N.yaml --json` with every field of the
   compiled plan pinned for predicted.step_time_s and its breakdown, and checks
   the planner costed the plan that was compiled.

Prints a Markdown table: plan, predicted, measured median step time, error =
(predicted − measured)/measured, the CPU seconds per rank per timed step
(from two runs, warm-up only and warm-up + timed, so start-up cancels) and
the error against it, the machine's 1-minute load average after the run, and
the predicted breakdown. Other processes share these cores: calibration
times kernels in thread CPU time, so it measures the core, not the share of
it left over; a wall-clock step on a busy machine is slower by that share,
which the CPU-time column removes. Nothing is fitted to the
measured times: the only machine numbers are what calibration measured.
"""

import argparse
import json
import os
import re
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import strata_run as sr  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
TINY = os.path.join(sr.REPO, "examples", "models", "gpt-tiny.yaml")
MLP = os.path.join(sr.REPO, "examples", "models", "mlp.yaml")
GPT = os.path.join(HERE, "gpt-ddp.yaml")

# (label, model, ranks, pins). ZeRO-3 is left out: the runtime executes it as
# sharded optimizer state + reduce-scatter/all-gather (ZeRO-2's traffic), while
# the cost model prices per-layer parameter gathers; see docs/validation.md.
PLANS = [
    ("gpt-tiny 1 rank, mb 4x2", TINY, 1, ["micro_batch=4"]),
    ("gpt-tiny dp=2 zero=0, mb 4x1", TINY, 2, ["dp=2", "zero=0", "micro_batch=4"]),
    ("gpt-tiny dp=2 zero=1, mb 2x2", TINY, 2, ["dp=2", "zero=1", "micro_batch=2"]),
    ("gpt-tiny tp=2", TINY, 2, ["tp=2", "dp=1", "micro_batch=4"]),
    ("mlp 1 rank, mb 16x1", MLP, 1, ["micro_batch=16"]),
    ("mlp dp=2 zero=0, mb 8x1", MLP, 2, ["dp=2", "zero=0", "micro_batch=8"]),
    ("gpt-384 1 rank, mb 4x2", GPT, 1, ["micro_batch=4"]),
    ("gpt-384 dp=2 zero=0, mb 4x1", GPT, 2, ["dp=2", "zero=0", "micro_batch=4"]),
    ("gpt-384 dp=2 zero=1, mb 2x2", GPT, 2, ["dp=2", "zero=1", "micro_batch=2"]),
    ("gpt-384 dp=2 zero=2, mb 4x1", GPT, 2, ["dp=2", "zero=2", "micro_batch=4"]),
]


def plan_pins(summary):
    """Every field of a plan summary as --pin values, so `strata plan` costs
    exactly the plan `strata compile` chose."""
    fields = dict(re.findall(r"(\w+)=(\S+)", summary))
    pins = [f"dp={fields['dp']}", f"tp={fields['tp']}", f"pp={fields['pp']}",
            f"micro_batch={fields['micro_batch'].split('x')[0]}",
            f"zero={fields['zero']}", f"recompute={fields['recompute']}",
            f"placement={fields['order']}"]
    if int(fields["tp"]) > 1:
        pins.append("sp=" + ("true" if re.search(r"(^| )sp( |$)", summary) else "false"))
    return pins


def one_rank_spec(spec_text):
    """The calibrated spec with a topology of one device."""
    text = re.sub(r"(- \{name: shared-memory, size: )\d+", r"\g<1>1", spec_text)
    return re.sub(r"^name: (.*)$", r"name: \1-one-rank", text, flags=re.M)


def calibrate(strata, work, quick):
    spec2 = os.path.join(work, "cal-2.yaml")
    cmd = [strata, "calibrate", "--ranks", "2", "-o", spec2,
           "--keep-json", os.path.join(work, "cal-2.json")]
    if quick:
        cmd.append("--quick")
    print("$ " + " ".join(cmd), flush=True)
    print(sr.run(cmd, "strata calibrate").strip(), flush=True)
    with open(spec2) as f:
        text = f.read()
    with open(os.path.join(work, "cal-1.yaml"), "w") as f:
        f.write(one_rank_spec(text))


def predict(strata, model, spec, pins):
    cmd = [strata, "plan", model, "--cluster", spec, "--json"]
    for p in pins:
        cmd += ["--pin", p]
    return json.loads(sr.run(cmd, "strata plan"))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default=os.path.join(sr.REPO, "build"))
    ap.add_argument("--calibrate-build",
                    help="build dir whose strata runs `calibrate` (default: --build)")
    ap.add_argument("--steps", type=int, default=8, help="timed steps per plan")
    ap.add_argument("--warmup", type=int, default=3, help="untimed steps first")
    ap.add_argument("--quick-calibrate", action="store_true")
    ap.add_argument("--calibrated", help="reuse DIR/cal-{1,2}.yaml from an earlier run")
    ap.add_argument("--work", help="keep binaries, logs and specs here")
    ap.add_argument("--only", help="run only plans whose label contains this")
    args = ap.parse_args(argv)
    if args.steps < 1 or args.warmup < 0:
        ap.error("--steps must be >= 1 and --warmup >= 0")
    try:
        strata = sr.find_tools(args.build)
        sr.require_mpirun()
        work = args.work or tempfile.mkdtemp(prefix="strata-pvm-")
        os.makedirs(work, exist_ok=True)
        specs = args.calibrated or work
        if not args.calibrated:
            calibrator = sr.find_tools(args.calibrate_build or args.build)
            calibrate(calibrator, work, args.quick_calibrate)
        rows, errors, cpu_errors = [], [], []
        for label, model, ranks, pins in PLANS:
            if args.only and args.only not in label:
                continue
            binary = os.path.join(work, re.sub(r"\W+", "_", label))
            try:
                summary = sr.compile_plan(strata, model, ranks, pins, binary)
            except sr.BenchError as e:
                first = str(e).strip().splitlines()[-1]
                rows.append([label, f"not compiled: {first}"] + ["-"] * 7)
                continue
            spec = os.path.join(specs, f"cal-{ranks}.yaml")
            doc = predict(strata, model, spec, plan_pins(summary))
            costed = doc["plan"]
            if (costed["dp"], costed["tp"], costed["micro_batch"], costed["zero"]) != (
                    int(re.search(r"dp=(\d+)", summary).group(1)),
                    int(re.search(r"tp=(\d+)", summary).group(1)),
                    int(re.search(r"micro_batch=(\d+)", summary).group(1)),
                    int(re.search(r"zero=(\d+)", summary).group(1))):
                raise sr.BenchError(f"{label}: planner costed {costed}, compiled {summary}")
            # CPU time per rank per timed step, from a run of the warm-up
            # steps alone and one of warm-up + timed steps: a rank is busy
            # (computing or polling MPI) for the whole of an uncontended step,
            # and CPU time does not grow while other processes hold the core.
            cpu = []
            sr.run_program(binary, ranks, args.warmup, binary + ".w.jsonl", cpu=cpu)
            steps = sr.run_program(binary, ranks, args.warmup + args.steps,
                                   binary + ".jsonl", cpu=cpu)
            cpu_step = (cpu[1] - cpu[0]) / args.steps / ranks
            measured, times = sr.median_step_time(steps, args.warmup)
            load = os.getloadavg()[0]
            pred = doc["predicted"]["step_time_s"]
            b = doc["predicted"]["breakdown"]
            err = (pred - measured) / measured
            err_cpu = (pred - cpu_step) / cpu_step
            errors.append(err)
            cpu_errors.append(err_cpu)
            terms = ", ".join(f"{k[:-2]} {v * 1e3:.1f}" for k, v in b.items() if v > 0)
            rows.append([label, summary, f"{pred:.4f}", f"{measured:.4f}",
                         f"{err * 100:+.0f}%", f"{cpu_step:.4f}", f"{err_cpu * 100:+.0f}%",
                         f"{load:.1f}", terms])
            print(f"  {label}: predicted {pred:.4f} s, measured {measured:.4f} s "
                  f"({err * 100:+.0f}%)", file=sys.stderr, flush=True)
    except sr.BenchError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print()
    sr.print_table(["plan", "compiled plan", "predicted s", "measured s (median)", "error",
                    "measured CPU s/step/rank", "error vs CPU", "load avg (1 min)",
                    "predicted breakdown (ms)"], rows)
    if errors:
        for name, errs in (("wall-clock median", errors), ("CPU time", cpu_errors)):
            inside = sum(abs(e) <= 0.25 for e in errs)
            print(f"{name}: {inside}/{len(errs)} plans within ±25%, mean |error| "
                  f"{sum(abs(e) for e in errs) / len(errs) * 100:.0f}%")
        print(f"specs and logs in {work}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
