#!/usr/bin/python3
"""ONNX models exported from PyTorch 1.13 are imported, planned, compiled and
trained: an MLP language model and a GPT-2 (tests/reference/onnx_models.py)
exported with torch.onnx.export are compiled by `strata compile model.onnx`
(MLP: one rank, dp=2, dp=2 with ZeRO-1/2/3, pp=2, tp=2, tp=2 x dp=2; GPT-2:
one rank, dp=2, ZeRO-3, pp=2, tp=2) and trained 10 steps from the exported
weights (--init) on one token file; every step's loss and grad_norm must be
within 1e-4 relative of the same nn.Module trained by PyTorch (and an MLP
with tanh * sigmoid activations on one rank and tp=2, and one with the exact
nn.GELU() and x / sqrt(mean(x * x) + eps) * w on one rank, dp=2 and tp=2). `strata plan`
chooses a plan for the MLP unpinned; examples/onnx exports, compiles and
trains.

Exits 77 (skipped) when strata was built without ONNX support.
"""

import os
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from e2e_common import (MPI_OVERSUBSCRIBE_ENV, Session, read_log,  # noqa: E402
                        train_against_reference)

STEPS = 10
RTOL = 1e-4  # the contract; never loosened
SKIP = 77

S = Session(__doc__)


def export(model, training):
    onnx = S.path(f"{model}.onnx")
    tokens = S.path(f"{model}.tokens.bin")
    S.reference_tool("onnx_models.py", "export", "--model", model, "--out", onnx,
                     "--tokens-out", tokens, "--training", training)
    init = S.path(f"{model}.init.safetensors")
    log = S.path(f"{model}.ref.jsonl")
    S.reference_tool("onnx_models.py", "train", "--model", model, "--init", init,
                     "--data", tokens, "--steps", STEPS, "--log", log,
                     "--sidecar", S.path(f"{model}.yaml"))
    return onnx, ["--init", init, "--data", tokens], log


def train(name, model, ranks, pins, data, ref_log):
    train_against_reference(S, name, model, ranks, pins, data, ref_log, STEPS, RTOL)


def mlp():
    onnx, data, ref = export(
        "mlp", '{"global_batch": 8, "optimizer": {"kind": "sgd", "lr": 0.1, "momentum": 0.9}}')
    imported = S.run([S.strata, "import", onnx])
    S.check('strata.param "fc1.weight"' in imported.stdout and
            'strata.param "pos"' in imported.stdout and
            "transpose_b = true" in imported.stdout,
            "the parameters keep their torch names; nn.Linear reads its weight transposed",
            imported.stdout[:2000])
    train("mlp1", onnx, 1, {}, data, ref)
    train("mlp-dp2", onnx, 2, {"dp": 2}, data, ref)
    for zero in (1, 2, 3):
        train(f"mlp-dp2-zero{zero}", onnx, 2, {"dp": 2, "zero": zero}, data, ref)
    train("mlp-pp2", onnx, 2, {"pp": 2}, data, ref)
    train("mlp-tp2", onnx, 2, {"tp": 2}, data, ref)
    train("mlp-tp2-dp2", onnx, 4, {"tp": 2, "dp": 2}, data, ref)
    proc = S.run([S.strata, "plan", onnx, "--cluster", "local:2"])
    S.check("\nplan: " in proc.stdout, "strata plan chooses a plan for the ONNX model",
            proc.stdout)


def example():
    """examples/onnx: the export script, the sidecar beside it, compile, train."""
    onnx = S.path("example", "mlp.onnx")
    os.makedirs(os.path.dirname(onnx), exist_ok=True)
    S.run(["/usr/bin/python3", os.path.join(S.root, "examples", "onnx", "export_mlp.py"),
           "--out", onnx])
    shutil.copy(os.path.join(S.root, "examples", "onnx", "mlp.yaml"), S.path("example"))
    out = S.path("example", "mlp")
    S.run([S.strata, "compile", onnx, "--cluster", "local:2", "--pin", "tp=2", "-o", out])
    log = S.path("example", "log.jsonl")
    S.run(["mpirun", "--oversubscribe", "-np", 2, out, "--steps", 20, "--log", log],
          env=MPI_OVERSUBSCRIBE_ENV)
    losses = [r["loss"] for r in read_log(log)]
    S.check(len(losses) == 20 and sum(losses[-5:]) < sum(losses[:5]),
            "the example trains 20 steps under tp=2 and its loss falls", f"{losses}")


def gated():
    """Tanh and Sigmoid (strata.unary) train like torch's."""
    onnx, data, ref = export("gated", '{"global_batch": 8, "optimizer": {"kind": "adamw", '
                                      '"lr": 0.01}}')
    train("gated1", onnx, 1, {}, data, ref)
    train("gated-tp2", onnx, 2, {"tp": 2}, data, ref)


def gelu_rms():
    """The exact nn.GELU() (Div, Erf, Add of a constant, Mul) and
    x / sqrt(mean(x * x) + eps) * w (ReduceMean, Sqrt, Div of two tensors,
    Mul by a [H] parameter: strata.binary, no batch-sized copies)."""
    onnx, data, ref = export("gelu_rms", '{"global_batch": 8, "optimizer": {"kind": '
                                         '"adamw", "lr": 0.01}}')
    imported = S.run([S.strata, "import", onnx]).stdout
    S.check('kind = "erf"' in imported and 'kind = "sqrt"' in imported and
            'kind = "div"' in imported and 'kind = "mul"' in imported and
            "strata.concat" not in imported and "strata.constant" in imported,
            "Erf and Sqrt import as strata.unary; Div, Add of a constant and "
            "Mul by w as strata.binary (no concatenated copies)", imported[:3000])
    train("gelu_rms1", onnx, 1, {}, data, ref)
    train("gelu_rms-dp2", onnx, 2, {"dp": 2}, data, ref)
    train("gelu_rms-tp2", onnx, 2, {"tp": 2}, data, ref)


def gpt():
    """GPT-2 (models.GPT, HF semantics) exported at opset 17: GELU's tanh
    form, the causal masked_fill and the position embeddings are imported as
    strata.gelu, a causal softmax and embedding(wpe, positions)."""
    onnx, data, ref = export("gpt", '{"global_batch": 8, "optimizer": {"kind": "adamw", '
                                    '"lr": 0.001}}')
    imported = S.run([S.strata, "import", onnx]).stdout
    S.check("strata.gelu" in imported and "causal = true" in imported and
            'strata.input "positions"' in imported and
            'strata.param "ln_f.bias"' in imported and "strata.transpose %" in imported,
            "GELU, the causal mask and positions are recognised; parameters the exporter "
            "deduplicated keep their own names", imported[:3000])
    train("gpt1", onnx, 1, {}, data, ref)
    # The weights `strata import --weights-out` reads out of the .onnx are
    # the exported ones: training from them matches torch too.
    weights = S.path("gpt.weights.safetensors")
    S.run([S.strata, "import", onnx, "--weights-out", weights, "-o", os.devnull])
    train("gpt1-weights-out", onnx, 1, {}, ["--init", weights, *data[2:]], ref)
    train("gpt-dp2", onnx, 2, {"dp": 2}, data, ref)
    for zero in (1, 2, 3):
        train(f"gpt-dp2-zero{zero}", onnx, 2, {"dp": 2, "zero": zero}, data, ref)
    train("gpt-pp2", onnx, 2, {"pp": 2}, data, ref)
    train("gpt-tp2", onnx, 2, {"tp": 2}, data, ref)
    train("gpt-tp2-dp2-zero1", onnx, 4, {"tp": 2, "dp": 2, "zero": 1}, data, ref)
    train("gpt-tp2-pp2", onnx, 4, {"tp": 2, "pp": 2}, data, ref)


def onnx_supported():
    probe = S.run([S.strata, "import", os.path.join(S.dir, "probe.onnx")], expect_ok=False)
    return "built without ONNX support" not in probe.stderr


if not onnx_supported():
    print("SKIP: strata was built without ONNX support (libonnx-dev)")
    sys.exit(SKIP)
S.case("an MLP exported from torch: one rank, dp, ZeRO, pp, tp against torch", mlp)
S.case("tanh and sigmoid activations: one rank, tp against torch", gated)
S.case("exact GELU and a hand-written RMS norm: one rank, dp, tp against torch",
       gelu_rms)
S.case("GPT-2 exported from torch: one rank, dp, ZeRO 1-3, pp, tp, tp x dp, tp x pp against torch",
       gpt)
S.case("examples/onnx: export, compile, train", example)
S.finish()
