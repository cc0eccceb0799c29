"""Independent plain-PyTorch definitions of Strata's `gpt`, `llama` and `mlp`
presets.

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
Llama (HF LlamaForCausalLM, nn.Linear layout [out, in], no biases):
  model.embed_tokens.weight [V,H],
  model.layers.{i}.self_attn.{q,k,v,o}_proj.weight ([nh*d,H], [kv*d,H] x2,
  [H,nh*d]), model.layers.{i}.mlp.{gate,up,down}_proj.weight ([F,H], [F,H],
  [H,F]), model.layers.{i}.{input,post_attention}_layernorm.weight [H],
  model.norm.weight [H], lm_head.weight [V,H] (absent when tied).
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


class RMSNorm(nn.Module):
    """HF LlamaRMSNorm: weight * x / sqrt(mean(x^2) + eps), no bias."""

    def __init__(self, hidden, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden))
        self.eps = eps

    def forward(self, x):
        variance = x.pow(2).mean(-1, keepdim=True)
        return self.weight * (x * torch.rsqrt(variance + self.eps))


def rotate_half(x):
    """HF Llama's rotate_half: [x1, x2] -> [-x2, x1] over the last dim."""
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def rotary_tables(seq_len, head_dim, theta, dtype):
    """cos, sin [S, d]: inverse frequencies theta^(-2i/d), i < d/2, repeated
    over both halves (HF LlamaRotaryEmbedding with position ids 0..S-1),
    computed in float64."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim))
    angles = torch.outer(torch.arange(seq_len, dtype=torch.float64), inv_freq)
    emb = torch.cat((angles, angles), dim=-1)
    return emb.cos().to(dtype), emb.sin().to(dtype)


class LlamaAttention(nn.Module):
    def __init__(self, hidden, heads, kv_heads, theta):
        super().__init__()
        self.heads, self.kv_heads = heads, kv_heads
        self.head_dim = hidden // heads
        self.theta = theta
        self.q_proj = nn.Linear(hidden, heads * self.head_dim, bias=False)
        self.k_proj = nn.Linear(hidden, kv_heads * self.head_dim, bias=False)
        self.v_proj = nn.Linear(hidden, kv_heads * self.head_dim, bias=False)
        self.o_proj = nn.Linear(heads * self.head_dim, hidden, bias=False)

    def forward(self, x):
        b, s, _ = x.shape
        d = self.head_dim
        q = self.q_proj(x).view(b, s, self.heads, d).transpose(1, 2)
        k = self.k_proj(x).view(b, s, self.kv_heads, d).transpose(1, 2)
        v = self.v_proj(x).view(b, s, self.kv_heads, d).transpose(1, 2)
        cos, sin = rotary_tables(s, d, self.theta, x.dtype)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        # Grouped-query attention: kv head j // group serves query head j
        # (HF repeat_kv).
        group = self.heads // self.kv_heads
        k = k[:, :, None].expand(b, self.kv_heads, group, s, d).reshape(b, self.heads, s, d)
        v = v[:, :, None].expand(b, self.kv_heads, group, s, d).reshape(b, self.heads, s, d)
        scores = torch.matmul(q, k.transpose(2, 3)) / math.sqrt(d)
        causal = torch.ones(s, s, dtype=torch.bool, device=x.device).tril()
        scores = scores.masked_fill(~causal, torch.finfo(scores.dtype).min)
        probs = torch.softmax(scores, dim=-1)
        out = torch.matmul(probs, v).transpose(1, 2).reshape(b, s, self.heads * d)
        return self.o_proj(out)


class LlamaMlp(nn.Module):
    def __init__(self, hidden, ffn_hidden):
        super().__init__()
        self.gate_proj = nn.Linear(hidden, ffn_hidden, bias=False)
        self.up_proj = nn.Linear(hidden, ffn_hidden, bias=False)
        self.down_proj = nn.Linear(ffn_hidden, hidden, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class LlamaDecoderLayer(nn.Module):
    def __init__(self, hidden, heads, kv_heads, ffn_hidden, theta, eps):
        super().__init__()
        self.self_attn = LlamaAttention(hidden, heads, kv_heads, theta)
        self.mlp = LlamaMlp(hidden, ffn_hidden)
        self.input_layernorm = RMSNorm(hidden, eps)
        self.post_attention_layernorm = RMSNorm(hidden, eps)

    def forward(self, x):
        x = x + self.self_attn(self.input_layernorm(x))
        return x + self.mlp(self.post_attention_layernorm(x))


class LlamaModel(nn.Module):
    def __init__(self, vocab, hidden, heads, kv_heads, layers, ffn_hidden, theta, eps):
        super().__init__()
        self.embed_tokens = nn.Embedding(vocab, hidden)
        self.layers = nn.ModuleList(
            LlamaDecoderLayer(hidden, heads, kv_heads, ffn_hidden, theta, eps)
            for _ in range(layers))
        self.norm = RMSNorm(hidden, eps)


class Llama(nn.Module):
    """LlamaForCausalLM; forward(ids, targets) -> mean CE loss. Parameter
    names are HF's (`model.` prefix, `lm_head.weight` unless tied)."""

    def __init__(self, vocab, seq_len, hidden, heads, layers, ffn_hidden, kv_heads=None,
                 rope_theta=10000.0, norm_eps=1e-5, tie_embeddings=False):
        super().__init__()
        kv_heads = kv_heads or heads
        if hidden % heads or heads % kv_heads or (hidden // heads) % 2:
            raise ValueError(f"hidden ({hidden}), heads ({heads}) and kv_heads ({kv_heads}) "
                             "must give an even head_dim and kv_heads dividing heads")
        self.config = dict(vocab=vocab, seq_len=seq_len, hidden=hidden, heads=heads,
                           kv_heads=kv_heads, layers=layers, ffn_hidden=ffn_hidden,
                           rope_theta=rope_theta, norm_eps=norm_eps,
                           tie_embeddings=tie_embeddings)
        self.model = LlamaModel(vocab, hidden, heads, kv_heads, layers, ffn_hidden,
                                rope_theta, norm_eps)
        self.lm_head = nn.Linear(hidden, vocab, bias=False)
        if tie_embeddings:
            self.lm_head.weight = self.model.embed_tokens.weight

    def logits(self, ids):
        if ids.shape[1] > self.config["seq_len"]:
            raise ValueError(f"sequence of {ids.shape[1]} tokens exceeds seq_len "
                             f"{self.config['seq_len']}")
        x = self.model.embed_tokens(ids)
        for layer in self.model.layers:
            x = layer(x)
        return self.lm_head(self.model.norm(x))

    def forward(self, ids, targets):
        logits = self.logits(ids)
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


def build_model(spec, dtype=torch.float32):
    """Builds the model named by a parsed spec (spec.ModelConfig)."""
    m = spec
    if m.family == "gpt":
        model = GPT(m.vocab, m.seq_len, m.hidden, m.heads, m.layers, m.ffn_hidden)
    elif m.family == "llama":
        model = Llama(m.vocab, m.seq_len, m.hidden, m.heads, m.layers, m.ffn_hidden,
                      m.kv_heads, m.rope_theta, m.norm_eps, m.tie_embeddings)
    elif m.family == "mlp":
        model = MlpLM(m.vocab, m.hidden, m.layers, m.ffn_hidden, m.activation, m.seq_len)
    elif m.family == "graph":
        from graph import GraphModel
        model = GraphModel(m.graph)
    else:
        raise ValueError(f"the reference implements the gpt, llama and mlp presets, "
                         f"not '{m.family}'")
    return model.to(dtype)


def init_weights(model, seed):
    """HF GPT-2 `_init_weights` recipe, drawn from torch.Generator(seed).

    Matrices and embeddings ~ N(0, 0.02); biases 0; LayerNorm weight 1, bias 0;
    every `c_proj.weight` (attention and MLP output projections) ~
    N(0, 0.02/sqrt(2*layers)). Draws happen in named_parameters() order, so a
    seed always gives the same weights (they are not HF's bit pattern: HF's
    draw order depends on its module construction, which does not matter here).
    """
    if hasattr(model, "graph"):
        from graph import init_graph
        return init_graph(model, seed)
    gen = torch.Generator().manual_seed(int(seed))
    if isinstance(model, Llama):
        return _init_llama(model, gen)
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


def _init_llama(model, gen):
    """HF LlamaPreTrainedModel `_init_weights`: every Linear and the embedding
    N(0, initializer_range = 0.02), RMSNorm weights 1; drawn in
    named_parameters() order."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.fill_(1.0)
            else:
                p.copy_(torch.normal(0.0, 0.02, size=p.shape, generator=gen,
                                     dtype=torch.float64))
    return model


def state_numpy(model):
    """Parameters as {name: float32 numpy array} for safetensors."""
    return {n: p.detach().to(torch.float32).cpu().numpy() for n, p in model.named_parameters()}


def _normalise_llama_names(model, tensors, path):
    """HF Llama checkpoints may carry the rotary `inv_freq` buffers (not
    parameters) and, for tied models, an `lm_head.weight` equal to the
    embedding."""
    out = {n: a for n, a in tensors.items() if not n.endswith(".rotary_emb.inv_freq")}
    if model.config["tie_embeddings"] and "lm_head.weight" in out:
        head = out.pop("lm_head.weight")
        embed = out.get("model.embed_tokens.weight")
        if embed is None or head.shape != embed.shape or not (head == embed).all():
            raise ValueError(f"{path}: lm_head.weight differs from model.embed_tokens.weight, "
                             "but the model ties them; drop lm_head.weight or make it equal")
    return out


def _normalise_hf_names(model, tensors, path):
    """Accepts Hugging Face GPT-2 checkpoint spellings for the gpt model: a
    `transformer.` prefix, the attention-mask buffers `h.{i}.attn.bias` /
    `masked_bias` (not parameters), and an explicit `lm_head.weight` as long as
    it really is tied to wte (equal values)."""
    if isinstance(model, Llama):
        return _normalise_llama_names(model, tensors, path)
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
