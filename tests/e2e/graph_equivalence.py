#!/usr/bin/python3
"""Explicit graphs are planned, compiled and trained: examples/models/
graph-mlp.yaml (the `graph:` form, not a preset) under one rank, dp=2,
dp=2 with ZeRO-1/2/3, pp=2 (the planner balancing the graph's pipeline
units by cost) and tp=2 (sharded by the ops' rules), each 10 steps from the same --init weights and token file,
every step's loss and grad_norm within 1e-4 relative of the PyTorch reference
(tests/reference/graph.py runs the graph op by op). A graph with no layer
annotations at all is split op by op under pp=2 and pp=3; and `strata plan`
chooses a plan for it unpinned.
"""

import os
import sys

import yaml

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from e2e_common import Session, train_against_reference  # noqa: E402

STEPS = 10
RTOL = 1e-4  # the contract; never loosened

S = Session(__doc__)


def reference(spec):
    """Init weights, tokens and the PyTorch log for SPEC."""
    base = os.path.splitext(os.path.basename(spec))[0]
    init, tokens, log = (S.path(f"{base}.{x}") for x in ("init.safetensors", "tokens.bin",
                                                          "ref.jsonl"))
    S.reference_tool("make_inputs.py", "--model-yaml", spec, "--init-out", init,
                     "--seed", "3", "--tokens-out", tokens, "--num-tokens", "4000")
    S.reference_tool("train.py", "--model-yaml", spec, "--init", init, "--data", tokens,
                     "--steps", STEPS, "--log", log)
    return ["--init", init, "--data", tokens], log


def train(name, spec, ranks, pins, data, ref_log):
    train_against_reference(S, name, spec, ranks, pins, data, ref_log, STEPS, RTOL)


def annotated():
    spec = os.path.join(S.examples, "graph-mlp.yaml")
    data, ref = reference(spec)
    train("graph1", spec, 1, {}, data, ref)
    train("graph-dp2", spec, 2, {"dp": 2}, data, ref)
    for zero in (1, 2, 3):
        train(f"graph-dp2-zero{zero}", spec, 2, {"dp": 2, "zero": zero}, data, ref)
    train("graph-pp2", spec, 2, {"pp": 2}, data, ref)
    train("graph-pp2-dp2", spec, 4, {"pp": 2, "dp": 2}, data, ref)
    # Tensor parallelism by the ops' sharding rules: each matmul weight with
    # a whole input split by its output features, the rest propagated.
    train("graph-tp2", spec, 2, {"tp": 2}, data, ref)
    train("graph-tp2-dp2", spec, 4, {"tp": 2, "dp": 2}, data, ref)


def unannotated():
    """graph-mlp without any `layer:`: every op is a pipeline unit."""
    with open(os.path.join(S.examples, "graph-mlp.yaml")) as f:
        doc = yaml.safe_load(f)
    for entry in doc["graph"]["params"] + doc["graph"]["ops"]:
        entry.pop("layer", None)
    doc["training"]["micro_batch"] = 2
    spec = S.write_text("graph-plain.yaml", yaml.safe_dump(doc, sort_keys=False))
    data, ref = reference(spec)
    train("plain-pp2", spec, 2, {"pp": 2}, data, ref)
    train("plain-pp3", spec, 3, {"pp": 3, "schedule": "gpipe"}, data, ref)
    proc = S.run([S.strata, "plan", spec, "--cluster", "local:2"])
    S.check("explicit graph of 10 pipeline units" in proc.stdout and
            "\nplan: " in proc.stdout,
            "strata plan costs the graph's 10 ops as pipeline units and chooses a plan",
            proc.stdout)
    train("plain-tp2-pp2", spec, 4, {"tp": 2, "pp": 2}, data, ref)
    bad = S.run([S.strata, "compile", spec, "--cluster", "local:2", "--pin", "tp=2",
                 "--pin", "sp=true", "-o", S.path("sp")], expect_ok=False)
    S.check(bad.returncode != 0 and "sequence parallelism of an explicit graph" in bad.stderr,
            "sp on an explicit graph is refused with the reason", bad.stderr)


S.case("graph-mlp.yaml: one rank, dp, ZeRO, pp against torch", annotated)
S.case("a graph without layer annotations: pp over single ops", unannotated)
S.finish()
