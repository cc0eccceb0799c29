"""Independent plain-PyTorch definitions of Strata's `gpt` and `mlp` presets.

These exist to check Strata, so they are written from the published semantics
(Hugging Face GPT2LMHeadModel, docs/model-spec.md), not from Strata's code.
Parameter names and layouts are the safetensors names Strata reads and writes:

GPT (HF GPT-2, dropout off):
  wte.weight [V,H], wpe.weight [S,H],
  h.{i}.ln_1.weight|bias [H], h.{i}.attn.c_attn.weight [H,3H] |bias [3H],
  h.{i}.attn.c_proj.weight [H,H] |bias, h.{i}.ln_2.weight|bias,
  h.{i}.mlp.c_fc.weight [H,F] |bias [F], h.{i}.mlp.c_proj.weight [F,H] |bias,
  ln_f.weight|bias; logits = ln_f(x) @ wte.weight^T (tied head).
  Conv1D layout: y = x @ W + b with W [in, out].
MLP token model:
  embed.weight [V,H]; x = x + fc2(act(fc1(x))) per layer with
  layers.{i}.fc1.weight [H,F] |bias [F], layers.{i}.fc2.weight [F,H] |bias [H];
  logits = x @ head.weight [H,V] + head.bias [V].
Both: loss = mean cross-entropy over every token of the batch.
"""

import math

import torch
import torch.nn as nn
import torch.nn.functional as F


def gelu_new(x):
    """GELU, tanh approximation, exactly as HF's NewGELUActivation."""
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


class Conv1D(nn.Module):
    """HF GPT-2's Conv1D: weight [in, out], y = x @ W + b."""

    def __init__(self, n_in, n_out):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(n_in, n_out))
        self.bias = nn.Parameter(torch.zeros(n_out))

    def forward(self, x):
        return torch.addmm(self.bias, x.reshape(-1, x.shape[-1]), self.weight).view(
            *x.shape[:-1], self.weight.shape[1])


class Attention(nn.Module):
    def __init__(self, hidden, heads):
        super().__init__()
        self.hidden, self.heads, self.head_dim = hidden, heads, hidden // heads
        self.c_attn = Conv1D(hidden, 3 * hidden)
        self.c_proj = Conv1D(hidden, hidden)

    def _split(self, t):  # [B,S,H] -> [B,heads,S,head_dim]
        b, s, _ = t.shape
        return t.view(b, s, self.heads, self.head_dim).permute(0, 2, 1, 3)

    def forward(self, x):
        b, s, _ = x.shape
        q, k, v = self.c_attn(x).split(self.hidden, dim=2)
        q, k, v = self._split(q), self._split(k), self._split(v)
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.head_dim)
        causal = torch.ones(s, s, dtype=torch.bool, device=x.device).tril()
        # HF fills with finfo.min rather than -inf; after softmax both are an
        # exact 0, and finfo.min keeps a fully masked row finite.
        scores = scores.masked_fill(~causal, torch.finfo(scores.dtype).min)
        probs = torch.softmax(scores, dim=-1)
        out = torch.matmul(probs, v).permute(0, 2, 1, 3).reshape(b, s, self.hidden)
        return self.c_proj(out)


class GptMlp(nn.Module):
    def __init__(self, hidden, ffn_hidden):
        super().__init__()
        self.c_fc = Conv1D(hidden, ffn_hidden)
        self.c_proj = Conv1D(ffn_hidden, hidden)

    def forward(self, x):
        return self.c_proj(gelu_new(self.c_fc(x)))


class Block(nn.Module):
    def __init__(self, hidden, heads, ffn_hidden):
        super().__init__()
        self.ln_1 = nn.LayerNorm(hidden, eps=1e-5)
        self.attn = Attention(hidden, heads)
        self.ln_2 = nn.LayerNorm(hidden, eps=1e-5)
        self.mlp = GptMlp(hidden, ffn_hidden)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    """GPT2LMHeadModel without dropout; forward(ids, targets) -> mean CE loss."""

    def __init__(self, vocab, seq_len, hidden, heads, layers, ffn_hidden=None):
        super().__init__()
        if hidden % heads:
            raise ValueError(f"hidden ({hidden}) must be a multiple of heads ({heads})")
        self.config = dict(vocab=vocab, seq_len=seq_len, hidden=hidden, heads=heads,
                           layers=layers, ffn_hidden=ffn_hidden or 4 * hidden)
        self.wte = nn.Embedding(vocab, hidden)
        self.wpe = nn.Embedding(seq_len, hidden)
        self.h = nn.ModuleList(Block(hidden, heads, self.config["ffn_hidden"]) for _ in range(layers))
        self.ln_f = nn.LayerNorm(hidden, eps=1e-5)

    def logits(self, ids):
        s = ids.shape[1]
        if s > self.wpe.weight.shape[0]:
            raise ValueError(f"sequence of {s} tokens exceeds seq_len {self.wpe.weight.shape[0]}")
        pos = torch.arange(s, device=ids.device)
        x = self.wte(ids) + self.wpe(pos)[None]
        for block in self.h:
            x = block(x)
        return torch.matmul(self.ln_f(x), self.wte.weight.t())

    def forward(self, ids, targets):
        logits = self.logits(ids)
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


class MlpLayer(nn.Module):
    def __init__(self, hidden, ffn_hidden):
        super().__init__()
        self.fc1 = Conv1D(hidden, ffn_hidden)
        self.fc2 = Conv1D(ffn_hidden, hidden)


class MlpLM(nn.Module):
    """Token-wise residual MLP language model; forward(ids, targets) -> loss."""

    def __init__(self, vocab, hidden, layers, ffn_hidden=None, activation="gelu", seq_len=None):
        super().__init__()
        if activation not in ("gelu", "relu"):
            raise ValueError(f"activation must be gelu or relu, got '{activation}'")
        self.config = dict(vocab=vocab, seq_len=seq_len, hidden=hidden, layers=layers,
                           ffn_hidden=ffn_hidden or 4 * hidden, activation=activation)
        self.act = gelu_new if activation == "gelu" else F.relu
        self.embed = nn.Embedding(vocab, hidden)
        self.layers = nn.ModuleList(MlpLayer(hidden, self.config["ffn_hidden"]) for _ in range(layers))
        self.head = Conv1D(hidden, vocab)

    def logits(self, ids):
        x = self.embed(ids)
        for layer in self.layers:
            x = x + layer.fc2(self.act(layer.fc1(x)))
        return self.head(x)

    def forward(self, ids, targets):
        logits = self.logits(ids)
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


def build_model(spec, dtype=torch.float32):
    """Builds the model named by a parsed spec (spec.ModelConfig)."""
    m = spec
    if m.family == "gpt":
        model = GPT(m.vocab, m.seq_len, m.hidden, m.heads, m.layers, m.ffn_hidden)
    elif m.family == "mlp":
        model = MlpLM(m.vocab, m.hidden, m.layers, m.ffn_hidden, m.activation, m.seq_len)
    else:
        raise ValueError(f"the reference implements the gpt and mlp presets, not '{m.family}'")
    return model.to(dtype)


def init_weights(model, seed):
    """HF GPT-2 `_init_weights` recipe, drawn from torch.Generator(seed).

    Matrices and embeddings ~ N(0, 0.02); biases 0; LayerNorm weight 1, bias 0;
    every `c_proj.weight` (attention and MLP output projections) ~
    N(0, 0.02/sqrt(2*layers)). Draws happen in named_parameters() order, so a
    seed always gives the same weights (they are not HF's bit pattern: HF's
    draw order depends on its module construction, which does not matter here).
    """
    gen = torch.Generator().manual_seed(int(seed))
    layers = model.config["layers"]
    with torch.no_grad():
        for name, p in model.named_parameters():
            leaf = name.rsplit(".", 1)[-1]
            is_norm = ".ln_" in "." + name or name.startswith("ln_f")
            if is_norm:
                p.fill_(1.0 if leaf == "weight" else 0.0)
            elif leaf == "bias":
                p.zero_()
            else:
                std = 0.02 / math.sqrt(2 * layers) if name.endswith("c_proj.weight") else 0.02
                p.copy_(torch.normal(0.0, std, size=p.shape, generator=gen, dtype=torch.float64))
    return model


def state_numpy(model):
    """Parameters as {name: float32 numpy array} for safetensors."""
    return {n: p.detach().to(torch.float32).cpu().numpy() for n, p in model.named_parameters()}


def _normalise_hf_names(model, tensors, path):
    """Accepts Hugging Face GPT-2 checkpoint spellings for the gpt model: a
    `transformer.` prefix, the attention-mask buffers `h.{i}.attn.bias` /
    `masked_bias` (not parameters), and an explicit `lm_head.weight` as long as
    it really is tied to wte (equal values)."""
    if not isinstance(model, GPT):
        return tensors
    out = {}
    for name, arr in tensors.items():
        if name.startswith("transformer."):
            name = name[len("transformer."):]
        if name.endswith(".attn.bias") or name.endswith(".attn.masked_bias"):
            continue
        out[name] = arr
    head = out.pop("lm_head.weight", None)
    if head is not None:
        wte = out.get("wte.weight")
        if wte is None or head.shape != wte.shape or not (head == wte).all():
            raise ValueError(f"{path}: lm_head.weight differs from wte.weight, but the gpt "
                             "model ties them; drop lm_head.weight or make it equal")
    return out


def load_state(model, tensors, path="<weights>"):
    """Copies {name: numpy array} into the model; every name and shape must match."""
    tensors = _normalise_hf_names(model, tensors, path)
    params = dict(model.named_parameters())
    missing = sorted(set(params) - set(tensors))
    extra = sorted(set(tensors) - set(params))
    if missing or extra:
        raise ValueError(f"{path}: tensor names do not match the model: missing {missing[:8]}"
                         f"{'...' if len(missing) > 8 else ''}, unexpected {extra[:8]}"
                         f"{'...' if len(extra) > 8 else ''}")
    with torch.no_grad():
        for name, p in params.items():
            arr = tensors[name]
            if tuple(arr.shape) != tuple(p.shape):
                raise ValueError(f"{path}: tensor '{name}' has shape {list(arr.shape)}, "
                                 f"the model needs {list(p.shape)}")
            p.copy_(torch.from_numpy(arr.astype("float64")).to(p.dtype))
    return model
