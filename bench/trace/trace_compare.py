#!/usr/bin/python3
"""A 4-rank local run's measured trace beside the planner's simulated one,
and predicted vs measured time per category.

  /usr/bin/python3 bench/trace/trace_compare.py [--build build] [--work DIR]
      [--model examples/models/gpt-tiny.yaml] [--ranks 4]
      [--pin dp=2 --pin pp=2 --pin micro_batch=1 ...] [--cluster local:4]
      [--steps 4] [--trace-steps 3..4]

1. `strata compile MODEL --cluster local:RANKS --pin ...` -> WORK/train.
2. `mpirun -np RANKS WORK/train --steps N --trace WORK/measured.json
   --trace-steps A..B`: every instruction of steps A..B on every rank.
3. `strata plan MODEL --cluster CLUSTER --pin <every field of the compiled
   plan> --json --trace WORK/predicted.json --html WORK/report.html
   --measured WORK/measured.json` (the report then shows the run too).
4. Prints a Markdown table: predicted and measured seconds per step for
   compute, exposed TP / DP / PP communication, bubble, optimizer, and the
   step; measured values are the mean over ranks and traced steps.

Open WORK/predicted.json and WORK/measured.json side by side in Perfetto
(ui.perfetto.dev, "Open trace file"): the same tracks per device.

How measured time is split (docs/report.md): a CPU rank runs one
instruction at a time, so the time of every collective or `wait` is exposed
communication on its group's track. On the pp track, time in sends (and
waits for them) is the transfer; time in receives (and waits for them) is
mostly waiting for the peer to produce the data, i.e. the bubble, plus the
copy. The split is a heuristic, so the table also compares the sum with the
prediction's PP comm + bubble. "other" is step time outside instructions (mostly the
end-of-step all-reduce of the loss and statistics).
"""

import argparse
import json
import os
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "ddp"))
import strata_run as sr  # noqa: E402

CATEGORIES = [
    ("compute", "compute"),
    ("exposed TP comm", "tp"),
    ("exposed DP comm (incl. ZeRO)", "dp"),
    ("exposed PP comm (sends)", "pp_send"),
    ("bubble (receives waiting)", "pp_recv"),
    ("optimizer", "optimizer"),
]


def measured_breakdown(doc):
    """-> ({category: mean seconds per step over ranks and steps}, ranks,
    steps). Tracks: 0 compute, 1 tp, 2 pp, 3 dp (docs/report.md)."""
    per = {}  # (rank, step) -> {cat: seconds}
    steps = {}
    for e in doc["traceEvents"]:
        if e.get("ph") != "X":
            continue
        key = (e["pid"], e["args"].get("step"))
        d = per.setdefault(key, {k: 0.0 for _, k in CATEGORIES})
        s = e["dur"] * 1e-6
        cat = e.get("cat")
        if cat == "step":
            steps[key] = s
        elif cat == "compute":
            d["compute"] += s
        elif cat == "optimizer":
            d["optimizer"] += s
        elif e["tid"] == 2:
            receive = e["name"].startswith(("recv", "wait recv"))
            d["pp_recv" if receive else "pp_send"] += s
        else:
            d["tp" if e["tid"] == 1 else "dp"] += s
    if not steps:
        raise sr.BenchError("the measured trace has no step events")
    n = len(steps)
    out = {k: sum(per[key][k] for key in steps) / n for _, k in CATEGORIES}
    out["step"] = sum(steps.values()) / n
    out["other"] = out["step"] - sum(out[k] for _, k in CATEGORIES)
    out["pp"] = out["pp_send"] + out["pp_recv"]
    ranks = len({k[0] for k in steps})
    return out, ranks, n


def predicted_breakdown(plan_doc):
    b = plan_doc["predicted"]["breakdown"]
    return {
        "compute": b["compute_s"],
        "tp": b["tp_comm_s"],
        "dp": b["dp_comm_s"] + b["zero_comm_s"],
        "pp_send": b["pp_comm_s"],
        "pp_recv": b["bubble_s"],
        "pp": b["pp_comm_s"] + b["bubble_s"],
        "optimizer": b["optimizer_s"],
        "step": plan_doc["predicted"]["step_time_s"],
    }


def pins_of(plan):
    """Every field of a plan JSON as --pin values (so the planner costs the
    plan that was compiled)."""
    return ["dp=%d" % plan["dp"], "tp=%d" % plan["tp"], "pp=%d" % plan["pp"],
            "vpp=%d" % plan["vpp"], "micro_batch=%d" % plan["micro_batch"],
            "num_microbatches=%d" % plan["num_microbatches"],
            "schedule=" + plan["schedule"], "zero=%d" % plan["zero"],
            "recompute=" + plan["recompute"], "sp=" + ("true" if plan["sp"] else "false"),
            "placement=" + ",".join(plan["placement"])]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default=os.path.join(sr.REPO, "build"))
    ap.add_argument("--work", default=None)
    ap.add_argument("--model", default=os.path.join(sr.REPO, "examples", "models",
                                                    "gpt-tiny.yaml"))
    ap.add_argument("--ranks", type=int, default=4)
    ap.add_argument("--pin", action="append", default=None,
                    help="plan pins for strata compile (default: dp=2 pp=2 "
                         "micro_batch=1)")
    ap.add_argument("--cluster", default=None,
                    help="cluster the prediction uses (default local:RANKS; a "
                         "calibrated YAML from `strata calibrate` predicts better)")
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--trace-steps", default="3..4")
    a = ap.parse_args()
    strata = sr.find_tools(a.build)
    work = a.work or tempfile.mkdtemp(prefix="strata-trace-")
    os.makedirs(work, exist_ok=True)
    pins = a.pin if a.pin is not None else ["dp=2", "pp=2", "micro_batch=1"]
    binary = os.path.join(work, "train")
    summary = sr.compile_plan(strata, a.model, a.ranks, pins, binary)
    measured_path = os.path.join(work, "measured.json")
    sr.run_program(binary, a.ranks, a.steps, os.path.join(work, "log.jsonl"),
                   extra=["--trace", measured_path, "--trace-steps", a.trace_steps])
    with open(measured_path) as f:
        measured_doc = json.load(f)
    # The plan that was compiled, every field pinned.
    cluster = a.cluster or "local:%d" % a.ranks
    base = [strata, "plan", a.model, "--cluster", cluster, "--json"]
    for p in pins:
        base += ["--pin", p]
    compiled = json.loads(sr.run(base, "strata plan (the compiled plan)"))["plan"]
    predicted_path = os.path.join(work, "predicted.json")
    cmd = [strata, "plan", a.model, "--cluster", cluster, "--json", "--trace",
           predicted_path, "--html", os.path.join(work, "report.html"),
           "--measured", measured_path]
    for p in pins_of(compiled):
        cmd += ["--pin", p]
    plan_doc = json.loads(sr.run(cmd, "strata plan --trace"))
    pred = predicted_breakdown(plan_doc)
    meas, ranks, n = measured_breakdown(measured_doc)
    print("plan: %s (%d ranks, steps %s traced: %d rank-steps)"
          % (summary, ranks, a.trace_steps, n))
    print("measured trace:  %s\npredicted trace: %s\nreport: %s\n"
          % (measured_path, predicted_path, os.path.join(work, "report.html")))
    rows = []
    for label, k in CATEGORIES + [("PP comm + bubble", "pp"),
                                  ("other (outside instructions)", "other"),
                                  ("step", "step")]:
        p = pred.get(k)
        m = meas[k]
        rows.append([label, "%.2f ms" % (p * 1e3) if p is not None else "-",
                     "%.2f ms" % (m * 1e3),
                     "%+.0f%%" % (100 * (p - m) / m) if p is not None and m > 0 else "-"])
    sr.print_table(["category", "predicted", "measured (mean over ranks)",
                    "error"], rows)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except sr.BenchError as e:
        print("trace_compare: error: %s" % e, file=sys.stderr)
        sys.exit(1)
