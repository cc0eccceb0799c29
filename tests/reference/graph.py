"""An explicit `graph:` model spec run by PyTorch, op by op.

Written from docs/model-spec.md's op table, not from Strata's code: every op
is the plain torch expression of its documented meaning, so the end-to-end
tests can hold Strata's training of any explicit graph to PyTorch. Parameters
keep the spec's names (dotted names become nested modules, so
`named_parameters()` spells them as written).
"""

import torch
import torch.nn.functional as F
from torch import nn

from models import gelu_new


def _matmul(a, b, transpose_a=False, transpose_b=False):
    if transpose_a:
        a = a.transpose(-1, -2)
    if transpose_b:
        b = b.transpose(-1, -2)
    return torch.matmul(a, b)


def _softmax(x, causal=False, scale=1.0):
    x = x * scale
    if causal:
        s = x.shape[-1]
        mask = torch.ones(s, s, dtype=torch.bool, device=x.device).triu(1)
        x = x.masked_fill(mask, float("-inf"))
    return torch.softmax(x, dim=-1)


def _reshape(x, shape):
    return x.reshape([x.shape[0] if d == "batch" else int(d) for d in shape])


def _rms_norm(x, weight, epsilon=1e-5):
    return weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + epsilon))


def _cross_entropy(logits, targets):
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1).long())


# op name -> f(*inputs, **attrs) returning one tensor or a tuple
OPS = {
    "embedding": lambda table, ids: F.embedding(ids.long(), table),
    "matmul": _matmul,
    "bias_add": lambda x, b: x + b,
    "add": lambda a, b: a + b,
    "mul": lambda a, b: a * b,
    "scale": lambda x, factor: x * factor,
    "gelu": lambda x: gelu_new(x),
    "relu": lambda x: F.relu(x),
    "silu": lambda x: F.silu(x),
    "silu_mul": lambda gate, up: F.silu(gate) * up,
    "layer_norm": lambda x, gamma, beta, epsilon=1e-5: F.layer_norm(
        x, (x.shape[-1],), gamma, beta, epsilon),
    "rms_norm": _rms_norm,
    "softmax": _softmax,
    "reshape": _reshape,
    "transpose": lambda x, permutation: x.permute(*permutation),
    "split": lambda x, axis, num: tuple(torch.chunk(x, num, dim=axis)),
    "concat": lambda *xs, axis: torch.cat(xs, dim=axis),
    "repeat_interleave": lambda x, axis, repeats: torch.repeat_interleave(x, repeats, dim=axis),
    "cross_entropy": _cross_entropy,
}


class GraphModel(nn.Module):
    """forward(ids, targets) -> loss, for a graph whose inputs are named
    `tokens` and `targets` (Strata's data contract)."""

    def __init__(self, graph):
        super().__init__()
        self.graph = graph
        self.param_names = []
        for p in graph["params"]:
            shape = [int(d) for d in p["shape"]]
            self._register(p["name"], nn.Parameter(torch.zeros(shape)))
            self.param_names.append(p["name"])
        for op in graph["ops"]:
            if op["op"] not in OPS:
                raise ValueError(f"graph op '{op['op']}' is not implemented by the reference")
        self.config = {"layers": 1}

    def _register(self, name, param):
        module = self
        *path, leaf = name.split(".")
        for part in path:
            if not hasattr(module, part):
                module.add_module(part, nn.Module())
            module = getattr(module, part)
        module.register_parameter(leaf, param)

    def param(self, name):
        return self.get_parameter(name)

    def forward(self, ids, targets):
        values = {}
        inputs = [i["name"] for i in self.graph["inputs"]]
        if "tokens" not in inputs or "targets" not in inputs:
            raise ValueError("the reference feeds graphs with inputs named tokens and targets")
        values["tokens"], values["targets"] = ids, targets
        for name in self.param_names:
            values[name] = self.param(name)
        for op in self.graph["ops"]:
            attrs = dict(op.get("attrs") or {})
            out = OPS[op["op"]](*[values[n] for n in op["inputs"]], **attrs)
            outs = out if isinstance(out, tuple) else (out,)
            for n, v in zip(op["outputs"], outs):
                values[n] = v
        return values[self.graph["outputs"][0]]


def init_graph(model, seed):
    """Each parameter by its spec's `init` (normal with `std`, zeros, ones),
    drawn in spec order from torch.Generator(seed)."""
    gen = torch.Generator().manual_seed(int(seed))
    with torch.no_grad():
        for p in model.graph["params"]:
            t = model.param(p["name"])
            kind = p.get("init", "normal")
            if kind == "zeros":
                t.zero_()
            elif kind == "ones":
                t.fill_(1.0)
            else:
                std = float(p.get("std", 0.02))
                t.copy_(torch.normal(0.0, std, size=t.shape, generator=gen,
                                     dtype=torch.float64))
    return model


def graph_sizes(graph):
    """(vocab, seq_len): the embedding table's rows and the tokens' length."""
    seq_len = vocab = 0
    for i in graph["inputs"]:
        if i["name"] == "tokens" and len(i["shape"]) == 2:
            seq_len = int(i["shape"][1])
    shapes = {p["name"]: p["shape"] for p in graph["params"]}
    for op in graph["ops"]:
        if op["op"] == "embedding" and op["inputs"][0] in shapes:
            vocab = int(shapes[op["inputs"][0]][0])
            break
    return vocab, seq_len
