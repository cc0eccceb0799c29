"""Reads the `model:` and `training:` sections of a Strata YAML model spec.

Only what the reference needs: the `gpt`, `llama` and `mlp` presets and the training
settings. Key spellings follow docs/model-spec.md; a few aliases are accepted
so that the reference keeps working while the spec evolves, and unknown keys
are reported on stderr rather than silently dropped.
"""

import dataclasses
import sys
from typing import Optional

try:
    import yaml
except ImportError:  # pragma: no cover - python3-yaml is installed here
    yaml = None


class SpecError(ValueError):
    """A spec the reference cannot use; the message names the file and key."""


@dataclasses.dataclass
class ModelConfig:
    family: str = ""
    vocab: int = 0
    seq_len: int = 0
    hidden: int = 0
    heads: int = 0
    layers: int = 0
    ffn_hidden: int = 0
    activation: str = "gelu"
    dtype: str = "float32"
    kv_heads: int = 0
    rope_theta: float = 10000.0
    norm_eps: float = 1e-5
    tie_embeddings: bool = False
    graph: Optional[dict] = None  # the explicit `graph:` section, as read


@dataclasses.dataclass
class TrainingConfig:
    global_batch: int = 8
    micro_batch: Optional[int] = None
    optimizer: str = "adamw"
    lr: float = 1e-3
    momentum: float = 0.0
    beta1: float = 0.9
    beta2: float = 0.999
    eps: float = 1e-8
    weight_decay: float = 0.0
    schedule: str = "constant"
    warmup_steps: int = 0
    min_lr: float = 0.0
    total_steps: int = 0
    grad_clip: float = 0.0
    seed: int = 0


# canonical key -> accepted spellings
_MODEL_KEYS = {
    "vocab": ("vocab", "vocab_size"),
    "seq_len": ("seq_len", "seq", "sequence_length", "n_positions", "max_seq_len"),
    "hidden": ("hidden", "hidden_size", "n_embd", "d_model"),
    "heads": ("heads", "num_heads", "n_head"),
    "layers": ("layers", "num_layers", "n_layer"),
    "ffn_hidden": ("ffn_hidden", "ffn", "ffn_hidden_size", "intermediate_size", "n_inner"),
    "activation": ("activation", "act"),
    "dtype": ("dtype",),
    "kv_heads": ("kv_heads", "num_key_value_heads"),
    "rope_theta": ("rope_theta",),
    "norm_eps": ("norm_eps", "rms_norm_eps"),
    "tie_embeddings": ("tie_embeddings", "tie_word_embeddings"),
}
_FAMILY_KEYS = ("preset", "family", "type", "kind", "arch")
_TRAIN_KEYS = {
    "global_batch": ("global_batch", "batch", "batch_size", "global_batch_size"),
    "micro_batch": ("micro_batch", "micro_batch_size"),
    "grad_clip": ("grad_clip", "clip_grad_norm", "max_grad_norm", "gradient_clip"),
    "seed": ("seed",),
}
_OPT_KEYS = {
    "optimizer": ("kind", "type", "name"),
    "lr": ("lr", "learning_rate"),
    "momentum": ("momentum",),
    "beta1": ("beta1",),
    "beta2": ("beta2",),
    "eps": ("eps", "epsilon"),
    "weight_decay": ("weight_decay", "wd"),
}
_SCHED_KEYS = {
    "schedule": ("kind", "type", "name"),
    "warmup_steps": ("warmup_steps", "warmup"),
    "min_lr": ("min_lr",),
    "total_steps": ("total_steps", "steps", "decay_steps"),
}


def _warn(path, msg):
    print(f"{path}: warning: {msg}", file=sys.stderr)


def _as_number(path, where, value, kind):
    # PyYAML (YAML 1.1) reads `1e-3` as a string; accept it as a number.
    if isinstance(value, bool):
        raise SpecError(f"{path}: {where} must be a number, got {value!r}")
    try:
        if kind is int:
            f = float(value)
            if f != int(f):
                raise ValueError
            return int(f)
        return float(value)
    except (TypeError, ValueError):
        raise SpecError(f"{path}: {where} must be {'an integer' if kind is int else 'a number'}, "
                        f"got {value!r}") from None


def _take(path, section, table, target, where, types):
    """Moves known keys of `section` into dataclass `target`; returns leftovers."""
    left = dict(section)
    for canon, names in table.items():
        for name in names:
            if name in left:
                v = left.pop(name)
                kind = types.get(canon, str)
                if v is None:
                    continue
                if kind is bool:
                    if not isinstance(v, bool):
                        raise SpecError(f"{path}: {where}.{name} must be true or false, got {v!r}")
                elif kind in (int, float):
                    v = _as_number(path, f"{where}.{name}", v, kind)
                else:
                    v = str(v).lower()
                setattr(target, canon, v)
                break
    return left


def _types(cls):
    out = {}
    for f in dataclasses.fields(cls):
        t = f.type
        if t in (int, "int", Optional[int], "Optional[int]"):
            out[f.name] = int
        elif t in (bool, "bool"):
            out[f.name] = bool
        elif t in (float, "float"):
            out[f.name] = float
    return out


def parse_spec(path, text=None):
    """-> (ModelConfig, TrainingConfig); raises SpecError with file context."""
    if yaml is None:
        raise SpecError("PyYAML is not available to /usr/bin/python3; install python3-yaml")
    if text is None:
        try:
            with open(path, encoding="utf-8") as f:
                text = f.read()
        except OSError as e:
            raise SpecError(f"{path}: cannot read the model spec: {e.strerror}") from None
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise SpecError(f"{path}: not valid YAML: {e}") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("model"), dict):
        raise SpecError(f"{path}: expected a mapping with a `model:` section")

    model = dict(doc["model"])
    m = ModelConfig()
    family = None
    for k in _FAMILY_KEYS:
        if k in model:
            family = str(model.pop(k)).lower()
            break
    # Also accept the nested form `model: {gpt: {...}}`.
    for name in ("gpt", "llama", "mlp"):
        if family is None and isinstance(model.get(name), dict):
            family = name
            model = dict(model.pop(name), **model)
    if family is None:
        if "graph" in model or "ops" in model:
            family = "graph"
        else:
            raise SpecError(f"{path}: model: names no preset (expected `preset: gpt` or `preset: mlp`)")
    if family == "graph":
        return _graph_spec(path, doc, model)
    if family not in ("gpt", "llama", "mlp"):
        raise SpecError(f"{path}: model preset '{family}' is not implemented by the reference "
                        "(it implements gpt, llama, mlp and explicit graphs)")
    m.family = family
    _preset_sizes(path, m, model, family)
    return m, _training(path, doc)


def _graph_spec(path, doc, model):
    """An explicit graph: sizes from the graph itself (see graph.py)."""
    from graph import graph_sizes
    graph = doc.get("graph")
    if not isinstance(graph, dict):
        raise SpecError(f"{path}: an explicit graph needs a top-level `graph:` section")
    m = ModelConfig(family="graph", graph=graph, dtype=str(model.get("dtype", "float32")))
    m.vocab, m.seq_len = graph_sizes(graph)
    if m.vocab <= 0 or m.seq_len <= 0:
        raise SpecError(f"{path}: the reference needs a `tokens` input [batch, seq] and an "
                        "embedding op to size an explicit graph")
    return m, _training(path, doc)


def _preset_sizes(path, m, model, family):
    rest = _take(path, model, _MODEL_KEYS, m, "model", _types(ModelConfig))
    for k in rest:
        _warn(path, f"model.{k} is not used by the reference")
    required = ["vocab", "seq_len", "hidden", "layers"] + (
        ["heads"] if family in ("gpt", "llama") else []) + (
        ["ffn_hidden"] if family == "llama" else [])
    for k in required:
        if getattr(m, k) <= 0:
            raise SpecError(f"{path}: model.{k} must be a positive integer")
    if m.ffn_hidden <= 0:
        m.ffn_hidden = 4 * m.hidden
    if family == "llama":
        if m.kv_heads <= 0:
            m.kv_heads = m.heads
        if m.heads % m.kv_heads:
            raise SpecError(f"{path}: model.kv_heads ({m.kv_heads}) must divide model.heads "
                            f"({m.heads})")
    if family in ("gpt", "llama") and m.hidden % m.heads:
        raise SpecError(f"{path}: model.hidden ({m.hidden}) must be divisible by model.heads ({m.heads})")
    if m.activation not in ("gelu", "relu", "gelu_new", "gelu_tanh"):
        raise SpecError(f"{path}: model.activation must be gelu or relu, got '{m.activation}'")
    if m.activation.startswith("gelu"):
        m.activation = "gelu"


def _training(path, doc):
    t = TrainingConfig()
    train = doc.get("training") or {}
    if not isinstance(train, dict):
        raise SpecError(f"{path}: `training:` must be a mapping")
    train = dict(train)
    opt = train.pop("optimizer", None)
    if isinstance(opt, str):
        opt = {"kind": opt}
    sched = train.pop("schedule", None) or train.pop("lr_schedule", None)
    if isinstance(sched, str):
        sched = {"kind": sched}
    # Allow the optimizer/schedule keys flat in `training:` too.
    rest = _take(path, train, _TRAIN_KEYS, t, "training", _types(TrainingConfig))
    rest = _take(path, rest, {k: v for k, v in _OPT_KEYS.items() if k != "optimizer"}, t,
                 "training", _types(TrainingConfig))
    rest = _take(path, rest, {k: v for k, v in _SCHED_KEYS.items() if k != "schedule"}, t,
                 "training", _types(TrainingConfig))
    for k in rest:
        _warn(path, f"training.{k} is not used by the reference")
    if opt is not None:
        if not isinstance(opt, dict):
            raise SpecError(f"{path}: training.optimizer must be a name or a mapping")
        opt = dict(opt)
        betas = opt.pop("betas", None)
        if betas is not None:
            if not isinstance(betas, (list, tuple)) or len(betas) != 2:
                raise SpecError(f"{path}: training.optimizer.betas must be [beta1, beta2]")
            t.beta1 = _as_number(path, "training.optimizer.betas[0]", betas[0], float)
            t.beta2 = _as_number(path, "training.optimizer.betas[1]", betas[1], float)
        for k in _take(path, opt, _OPT_KEYS, t, "training.optimizer", _types(TrainingConfig)):
            _warn(path, f"training.optimizer.{k} is not used by the reference")
    if sched is not None:
        if not isinstance(sched, dict):
            raise SpecError(f"{path}: training.schedule must be a name or a mapping")
        for k in _take(path, sched, _SCHED_KEYS, t, "training.schedule", _types(TrainingConfig)):
            _warn(path, f"training.schedule.{k} is not used by the reference")
    validate_training(t, path)
    return t


def validate_training(t, where):
    if t.optimizer not in ("adamw", "sgd"):
        raise SpecError(f"{where}: optimizer must be adamw or sgd, got '{t.optimizer}'")
    if t.schedule not in ("constant", "cosine", "linear"):
        raise SpecError(f"{where}: schedule must be constant, cosine or linear, got '{t.schedule}'")
    if t.global_batch <= 0:
        raise SpecError(f"{where}: global_batch must be positive")
    if t.micro_batch is not None and (t.micro_batch <= 0 or t.global_batch % t.micro_batch):
        raise SpecError(f"{where}: micro_batch ({t.micro_batch}) must be positive and divide "
                        f"global_batch ({t.global_batch})")
    if t.warmup_steps < 0:
        raise SpecError(f"{where}: warmup_steps must be >= 0")
    if t.schedule != "constant" and t.total_steps <= 0:
        raise SpecError(f"{where}: the {t.schedule} schedule needs total_steps > 0")
