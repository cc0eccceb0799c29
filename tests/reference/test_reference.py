#!/usr/bin/python3
"""Self-test of the PyTorch reference: /usr/bin/python3 tests/reference/test_reference.py

Checks the model math against an independent loop-based numpy version and
torch.autograd.gradcheck, the training-step semantics (micro-batching, data
order, lr schedule, weight-decay groups), safetensors I/O, that losses fall on
a learnable stream, and the CLIs end to end.
"""

import json
import math
import os
import struct
import subprocess
import sys
import tempfile
import unittest

import numpy as np
import torch
from torch.nn.utils.stateless import functional_call

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import compare_losses  # noqa: E402
import make_inputs  # noqa: E402
import models  # noqa: E402
import safetensors_io as st  # noqa: E402
import train  # noqa: E402
from spec import ModelConfig, SpecError, TrainingConfig, parse_spec  # noqa: E402

PY = "/usr/bin/python3"
GPT_YAML = os.path.join(HERE, "specs", "gpt-tiny.yaml")
MLP_YAML = os.path.join(HERE, "specs", "mlp-tiny.yaml")


def tiny_gpt(dtype=torch.float64, seed=0, **kw):
    cfg = dict(vocab=11, seq_len=5, hidden=8, heads=2, layers=2, ffn_hidden=12)
    cfg.update(kw)
    model = models.GPT(**cfg).to(dtype)
    models.init_weights(model, seed)
    # Perturb every parameter so LayerNorm affine terms and biases are not
    # trivially 1/0 and a wrong layout cannot hide behind symmetric values.
    g = torch.Generator().manual_seed(seed + 100)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.3 * torch.randn(p.shape, generator=g, dtype=torch.float64).to(dtype))
    return model


def naive_gpt_logits(params, ids, heads, layers):
    """GPT-2 forward with explicit loops in numpy float64 (one token, one head
    at a time), written independently of models.py."""
    P = {k: v.detach().double().numpy() for k, v in params.items()}

    def ln(x, w, b):
        mu = x.mean()
        var = ((x - mu) ** 2).mean()
        return (x - mu) / math.sqrt(var + 1e-5) * w + b

    def gelu(x):
        return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))

    out = []
    for seq in ids.tolist():
        S = len(seq)
        xs = [P["wte.weight"][t] + P["wpe.weight"][i] for i, t in enumerate(seq)]
        H = xs[0].shape[0]
        d = H // heads
        for l in range(layers):
            pre = f"h.{l}."
            qkv = [ln(x, P[pre + "ln_1.weight"], P[pre + "ln_1.bias"]) @ P[pre + "attn.c_attn.weight"]
                   + P[pre + "attn.c_attn.bias"] for x in xs]
            attn_out = []
            for i in range(S):
                merged = np.zeros(H)
                for h in range(heads):
                    q = qkv[i][h * d:(h + 1) * d]
                    scores = np.array([q @ qkv[j][H + h * d:H + (h + 1) * d] / math.sqrt(d)
                                       for j in range(i + 1)])
                    w = np.exp(scores - scores.max())
                    w /= w.sum()
                    merged[h * d:(h + 1) * d] = sum(w[j] * qkv[j][2 * H + h * d:2 * H + (h + 1) * d]
                                                    for j in range(i + 1))
                attn_out.append(merged @ P[pre + "attn.c_proj.weight"] + P[pre + "attn.c_proj.bias"])
            xs = [x + a for x, a in zip(xs, attn_out)]
            new = []
            for x in xs:
                hdn = gelu(ln(x, P[pre + "ln_2.weight"], P[pre + "ln_2.bias"]) @ P[pre + "mlp.c_fc.weight"]
                           + P[pre + "mlp.c_fc.bias"])
                new.append(x + hdn @ P[pre + "mlp.c_proj.weight"] + P[pre + "mlp.c_proj.bias"])
            xs = new
        out.append([ln(x, P["ln_f.weight"], P["ln_f.bias"]) @ P["wte.weight"].T for x in xs])
    return np.array(out)


def tiny_llama(dtype=torch.float64, seed=0, **kw):
    cfg = dict(vocab=11, seq_len=5, hidden=8, heads=4, kv_heads=2, layers=2, ffn_hidden=12,
               rope_theta=50.0)
    cfg.update(kw)
    model = models.Llama(**cfg).to(dtype)
    models.init_weights(model, seed)
    g = torch.Generator().manual_seed(seed + 100)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.3 * torch.randn(p.shape, generator=g, dtype=torch.float64).to(dtype))
    return model


def naive_llama_logits(params, ids, heads, kv_heads, layers, theta, eps=1e-5):
    """LlamaForCausalLM forward with explicit loops in numpy float64 (one
    token, one head and one feature pair at a time), written from HF's
    definitions independently of models.py: rotation of pair (i, i + d/2)
    by p * theta^(-2i/d), kv head h // (heads / kv_heads) for query head h."""
    P = {k: v.detach().double().numpy() for k, v in params.items()}
    head = P.get("lm_head.weight", P["model.embed_tokens.weight"])

    def rms(x, w):
        return x / math.sqrt((x * x).mean() + eps) * w

    def rope(v, pos):
        d = len(v)
        out = v.copy()
        for i in range(d // 2):
            a = pos * theta ** (-2.0 * i / d)
            out[i] = v[i] * math.cos(a) - v[i + d // 2] * math.sin(a)
            out[i + d // 2] = v[i + d // 2] * math.cos(a) + v[i] * math.sin(a)
        return out

    def silu(x):
        return x / (1 + np.exp(-x))

    out = []
    for seq in ids.tolist():
        S = len(seq)
        xs = [P["model.embed_tokens.weight"][t] for t in seq]
        H = xs[0].shape[0]
        d, group = H // heads, heads // kv_heads
        for l in range(layers):
            pre = f"model.layers.{l}."
            hs = [rms(x, P[pre + "input_layernorm.weight"]) for x in xs]
            q = [P[pre + "self_attn.q_proj.weight"] @ h for h in hs]
            k = [P[pre + "self_attn.k_proj.weight"] @ h for h in hs]
            v = [P[pre + "self_attn.v_proj.weight"] @ h for h in hs]
            attn_out = []
            for i in range(S):
                merged = np.zeros(heads * d)
                for h in range(heads):
                    kv = h // group
                    qi = rope(q[i][h * d:(h + 1) * d], i)
                    scores = np.array([qi @ rope(k[j][kv * d:(kv + 1) * d], j) / math.sqrt(d)
                                       for j in range(i + 1)])
                    w = np.exp(scores - scores.max())
                    w /= w.sum()
                    merged[h * d:(h + 1) * d] = sum(w[j] * v[j][kv * d:(kv + 1) * d]
                                                    for j in range(i + 1))
                attn_out.append(P[pre + "self_attn.o_proj.weight"] @ merged)
            xs = [x + a for x, a in zip(xs, attn_out)]
            new = []
            for x in xs:
                h = rms(x, P[pre + "post_attention_layernorm.weight"])
                act = silu(P[pre + "mlp.gate_proj.weight"] @ h) * (P[pre + "mlp.up_proj.weight"] @ h)
                new.append(x + P[pre + "mlp.down_proj.weight"] @ act)
            xs = new
        out.append([head @ rms(x, P["model.norm.weight"]) for x in xs])
    return np.array(out)


class LlamaMath(unittest.TestCase):
    def test_parameter_names_and_shapes(self):
        m = models.Llama(vocab=50, seq_len=7, hidden=16, heads=4, kv_heads=2, layers=2,
                         ffn_hidden=40)
        shapes = {n: tuple(p.shape) for n, p in m.named_parameters()}
        self.assertEqual(shapes["model.embed_tokens.weight"], (50, 16))
        self.assertEqual(shapes["model.layers.1.self_attn.q_proj.weight"], (16, 16))
        self.assertEqual(shapes["model.layers.1.self_attn.k_proj.weight"], (8, 16))
        self.assertEqual(shapes["model.layers.1.self_attn.v_proj.weight"], (8, 16))
        self.assertEqual(shapes["model.layers.1.self_attn.o_proj.weight"], (16, 16))
        self.assertEqual(shapes["model.layers.0.mlp.gate_proj.weight"], (40, 16))
        self.assertEqual(shapes["model.layers.0.mlp.up_proj.weight"], (40, 16))
        self.assertEqual(shapes["model.layers.0.mlp.down_proj.weight"], (16, 40))
        self.assertEqual(shapes["model.layers.0.input_layernorm.weight"], (16,))
        self.assertEqual(shapes["model.layers.0.post_attention_layernorm.weight"], (16,))
        self.assertEqual(shapes["model.norm.weight"], (16,))
        self.assertEqual(shapes["lm_head.weight"], (50, 16))
        self.assertEqual(len(shapes), 1 + 2 * 9 + 2)
        tied = models.Llama(vocab=50, seq_len=7, hidden=16, heads=4, layers=1, ffn_hidden=40,
                            tie_embeddings=True)
        self.assertNotIn("lm_head.weight", dict(tied.named_parameters()))

    def test_llama_matches_naive_loops(self):
        for kw in ({}, {"kv_heads": 1}, {"kv_heads": 4, "tie_embeddings": True}):
            with self.subTest(**kw):
                model = tiny_llama(**kw)
                ids = torch.tensor([[1, 4, 9, 3, 10], [0, 0, 7, 2, 5]])
                got = model.logits(ids).detach().numpy()
                c = model.config
                want = naive_llama_logits(dict(model.named_parameters()), ids, c["heads"],
                                          c["kv_heads"], c["layers"], c["rope_theta"])
                self.assertLess(np.abs(got - want).max(), 1e-10)

    def test_causal(self):
        model = tiny_llama()
        a = torch.tensor([[1, 4, 9, 3, 10]])
        b = torch.tensor([[1, 4, 9, 8, 2]])
        la, lb = model.logits(a), model.logits(b)
        self.assertTrue(torch.equal(la[:, :3], lb[:, :3]))
        self.assertGreater((la[:, 3:] - lb[:, 3:]).abs().max().item(), 1e-6)

    def test_gradcheck(self):
        model = tiny_llama(vocab=7, seq_len=4, hidden=8, heads=2, kv_heads=1, layers=1,
                           ffn_hidden=6)
        ModelMath._gradcheck(self, model, torch.tensor([[1, 4, 6, 3], [0, 2, 5, 5]]),
                             torch.tensor([[4, 6, 3, 0], [2, 5, 5, 1]]))

    def test_init_recipe_and_hf_buffers(self):
        m = models.init_weights(models.Llama(vocab=300, seq_len=8, hidden=64, heads=4,
                                             kv_heads=2, layers=2, ffn_hidden=128), 5)
        P = dict(m.named_parameters())
        self.assertTrue(torch.all(P["model.layers.1.input_layernorm.weight"] == 1))
        self.assertTrue(torch.all(P["model.norm.weight"] == 1))
        self.assertAlmostEqual(P["model.layers.1.mlp.down_proj.weight"].std().item(), 0.02,
                               delta=0.001)
        tensors = models.state_numpy(m)
        tensors["model.layers.0.self_attn.rotary_emb.inv_freq"] = np.ones(8, np.float32)
        m2 = models.Llama(vocab=300, seq_len=8, hidden=64, heads=4, kv_heads=2, layers=2,
                          ffn_hidden=128)
        models.load_state(m2, tensors)
        self.assertTrue(all(torch.equal(a.float(), b.float())
                            for a, b in zip(m.parameters(), m2.parameters())))


class ModelMath(unittest.TestCase):
    def test_gelu_is_tanh_approximation(self):
        x = torch.linspace(-6, 6, 101, dtype=torch.float64)
        ref = torch.nn.functional.gelu(x, approximate="tanh")
        self.assertLess((models.gelu_new(x) - ref).abs().max().item(), 1e-14)

    def test_parameter_names_and_shapes(self):
        m = models.GPT(vocab=50, seq_len=7, hidden=16, heads=4, layers=2)
        shapes = {n: tuple(p.shape) for n, p in m.named_parameters()}
        self.assertEqual(shapes["wte.weight"], (50, 16))
        self.assertEqual(shapes["wpe.weight"], (7, 16))
        self.assertEqual(shapes["h.1.attn.c_attn.weight"], (16, 48))
        self.assertEqual(shapes["h.1.attn.c_proj.weight"], (16, 16))
        self.assertEqual(shapes["h.0.mlp.c_fc.weight"], (16, 64))
        self.assertEqual(shapes["h.0.mlp.c_proj.weight"], (64, 16))
        self.assertEqual(shapes["ln_f.bias"], (16,))
        self.assertEqual(len(shapes), 2 + 2 * 12 + 2)
        mlp = models.MlpLM(vocab=50, hidden=16, layers=1, ffn_hidden=24)
        self.assertEqual({n: tuple(p.shape) for n, p in mlp.named_parameters()}, {
            "embed.weight": (50, 16), "layers.0.fc1.weight": (16, 24), "layers.0.fc1.bias": (24,),
            "layers.0.fc2.weight": (24, 16), "layers.0.fc2.bias": (16,),
            "head.weight": (16, 50), "head.bias": (50,)})

    def test_gpt_matches_naive_loops(self):
        model = tiny_gpt()
        ids = torch.tensor([[1, 4, 9, 3, 10], [0, 0, 7, 2, 5]])
        got = model.logits(ids).detach().numpy()
        want = naive_gpt_logits(dict(model.named_parameters()), ids, heads=2, layers=2)
        self.assertLess(np.abs(got - want).max(), 1e-10)

    def test_causal(self):
        model = tiny_gpt()
        a = torch.tensor([[1, 4, 9, 3, 10]])
        b = torch.tensor([[1, 4, 9, 8, 2]])
        la, lb = model.logits(a), model.logits(b)
        self.assertTrue(torch.equal(la[:, :3], lb[:, :3]))
        self.assertGreater((la[:, 3:] - lb[:, 3:]).abs().max().item(), 1e-6)

    def test_mlp_matches_formula(self):
        m = models.MlpLM(vocab=9, hidden=4, layers=2, ffn_hidden=6, activation="relu").double()
        models.init_weights(m, 1)
        with torch.no_grad():
            for p in m.parameters():
                p.add_(0.1)
        ids = torch.tensor([[3, 8, 0]])
        P = dict(m.named_parameters())
        x = P["embed.weight"][ids[0]]
        for i in range(2):
            x = x + torch.relu(x @ P[f"layers.{i}.fc1.weight"] + P[f"layers.{i}.fc1.bias"]) \
                @ P[f"layers.{i}.fc2.weight"] + P[f"layers.{i}.fc2.bias"]
        logits = x @ P["head.weight"] + P["head.bias"]
        self.assertLess((m.logits(ids)[0] - logits).abs().max().item(), 1e-12)
        tgt = torch.tensor([[8, 0, 5]])
        want = -torch.log_softmax(logits, -1)[torch.arange(3), tgt[0]].mean()
        self.assertLess(abs(m(ids, tgt).item() - want.item()), 1e-12)

    def _gradcheck(self, model, ids, tgt):
        names = [n for n, _ in model.named_parameters()]
        params = tuple(p.detach().clone().requires_grad_(True) for p in model.parameters())

        def loss_fn(*ps):
            return functional_call(model, dict(zip(names, ps)), (ids, tgt))

        self.assertTrue(torch.autograd.gradcheck(loss_fn, params, eps=1e-6, atol=1e-6, rtol=1e-5))

    def test_gpt_gradcheck(self):
        model = tiny_gpt(vocab=7, seq_len=4, hidden=4, heads=2, layers=1, ffn_hidden=6)
        self._gradcheck(model, torch.tensor([[1, 4, 6, 3], [0, 2, 5, 5]]),
                        torch.tensor([[4, 6, 3, 0], [2, 5, 5, 1]]))

    def test_mlp_gradcheck(self):
        m = models.MlpLM(vocab=7, hidden=4, layers=2, ffn_hidden=5, activation="gelu").double()
        models.init_weights(m, 2)
        with torch.no_grad():
            for p in m.parameters():
                p.add_(0.2)
        self._gradcheck(m, torch.tensor([[1, 4, 6]]), torch.tensor([[4, 6, 3]]))

    def test_init_recipe(self):
        m = models.GPT(vocab=300, seq_len=64, hidden=64, heads=4, layers=8)
        models.init_weights(m, 5)
        P = dict(m.named_parameters())
        self.assertTrue(torch.all(P["h.3.ln_1.weight"] == 1) and torch.all(P["ln_f.bias"] == 0))
        self.assertTrue(torch.all(P["h.3.attn.c_attn.bias"] == 0))
        self.assertAlmostEqual(P["wte.weight"].std().item(), 0.02, delta=0.001)
        self.assertAlmostEqual(P["h.2.mlp.c_proj.weight"].std().item(), 0.02 / 4, delta=0.0003)
        self.assertAlmostEqual(P["h.2.attn.c_proj.weight"].std().item(), 0.02 / 4, delta=0.0005)
        m2 = models.init_weights(models.GPT(vocab=300, seq_len=64, hidden=64, heads=4, layers=8), 5)
        self.assertTrue(all(torch.equal(a, b) for a, b in zip(m.parameters(), m2.parameters())))


class TrainingSemantics(unittest.TestCase):
    def test_micro_batches_equal_full_batch(self):
        model = tiny_gpt(seq_len=6)
        ids = torch.randint(0, 11, (8, 6), generator=torch.Generator().manual_seed(0))
        tgt = torch.randint(0, 11, (8, 6), generator=torch.Generator().manual_seed(1))
        full = train.accumulate_grads(model, ids, tgt, None)
        g_full = [p.grad.clone() for p in model.parameters()]
        for mb in (1, 2, 4):
            loss = train.accumulate_grads(model, ids, tgt, mb)
            self.assertAlmostEqual(loss, full, delta=1e-12)
            for a, p in zip(g_full, model.parameters()):
                self.assertLess((a - p.grad).abs().max().item(), 1e-13)

    def test_micro_batched_training_matches(self):
        tokens = make_inputs.make_tokens(400, 11, 3, "learnable")
        logs = []
        for mb in (None, 2):
            model = tiny_gpt(seq_len=6)
            t = TrainingConfig(global_batch=4, micro_batch=mb, lr=1e-2, weight_decay=0.1,
                               grad_clip=0.5, schedule="cosine", warmup_steps=1, total_steps=4)
            logs.append(train.train(model, train.TokenBatches(tokens, 6, 4), t, 4))
        for a, b in zip(*logs):
            for k in ("loss", "grad_norm", "lr"):
                self.assertAlmostEqual(a[k], b[k], delta=1e-11 * max(1, abs(a[k])))

    def test_data_order(self):
        tokens = np.arange(23)
        b = train.TokenBatches(tokens, seq_len=5, global_batch=3, order="sequential")
        self.assertEqual(b.num_samples, 4)
        self.assertEqual(b.sample_ids(0), [0, 1, 2])
        self.assertEqual(b.sample_ids(1), [3, 4, 5])
        x, y = b.batch(1)
        self.assertEqual(x[0].tolist(), [15, 16, 17, 18, 19])
        self.assertEqual(y[0].tolist(), [16, 17, 18, 19, 20])
        self.assertEqual(x[1].tolist(), [0, 1, 2, 3, 4])

    def test_random_windows(self):
        # splitmix64's first output from state 0 (Steele et al.).
        self.assertEqual(train.splitmix64(0), 0xE220A8397B1DCDAF)
        tokens = np.arange(1000)
        b = train.TokenBatches(tokens, seq_len=8, global_batch=4, seed=42)
        again = train.TokenBatches(tokens, seq_len=8, global_batch=4, seed=42)
        other = train.TokenBatches(tokens, seq_len=8, global_batch=4, seed=43)
        starts = [b.sample_start(k) for k in range(400)]
        self.assertEqual(starts, [again.sample_start(k) for k in range(400)])
        self.assertNotEqual(starts, [other.sample_start(k) for k in range(400)])
        self.assertTrue(all(0 <= a <= 1000 - 9 for a in starts))
        self.assertGreater(len(set(starts)), 300)
        x, y = b.batch(0)
        self.assertEqual(x[0].tolist(), list(range(starts[0], starts[0] + 8)))
        self.assertEqual(y[0].tolist(), list(range(starts[0] + 1, starts[0] + 9)))

    def test_lr_schedule(self):
        t = TrainingConfig(lr=1.0, min_lr=0.1, warmup_steps=4, total_steps=14, schedule="cosine")
        f = [train.lr_factor(s, t) for s in range(20)]
        self.assertEqual(f[:4], [0.25, 0.5, 0.75, 1.0])
        self.assertAlmostEqual(f[4], 1.0)
        self.assertAlmostEqual(f[9], 0.1 + 0.9 * 0.5)
        self.assertAlmostEqual(f[14], 0.1)
        self.assertAlmostEqual(f[19], 0.1)
        t.schedule = "linear"
        self.assertAlmostEqual(train.lr_factor(9, t), 0.55)
        self.assertAlmostEqual(train.lr_factor(30, t), 0.1)
        t.schedule, t.warmup_steps = "constant", 0
        self.assertEqual(train.lr_factor(7, t), 1.0)
        # The scheduler wiring logs base_lr * factor(step) for each step.
        model = models.MlpLM(vocab=5, hidden=2, layers=0)
        t = TrainingConfig(lr=0.5, min_lr=0.05, warmup_steps=2, total_steps=6, schedule="linear",
                           optimizer="sgd")
        recs = train.train(model, train.TokenBatches(np.arange(5).repeat(4), 3, 2), t, 8)
        self.assertEqual([r["lr"] for r in recs],
                         [0.5 * train.lr_factor(s, t) for s in range(8)])

    def test_weight_decay_groups(self):
        m = models.GPT(vocab=10, seq_len=4, hidden=4, heads=1, layers=1)
        groups = train.param_groups(m, 0.1)
        ids = {id(p): n for n, p in m.named_parameters()}
        decay = sorted(ids[id(p)] for p in groups[0]["params"])
        self.assertEqual(decay, ["h.0.attn.c_attn.weight", "h.0.attn.c_proj.weight",
                                 "h.0.mlp.c_fc.weight", "h.0.mlp.c_proj.weight",
                                 "wpe.weight", "wte.weight"])
        self.assertEqual(groups[1]["weight_decay"], 0.0)

    def _falls(self, model, t, vocab, seq, steps):
        tokens = make_inputs.make_tokens(4000, vocab, 7, "learnable")
        recs = train.train(model, train.TokenBatches(tokens, seq, t.global_batch), t, steps)
        first, last = recs[0]["loss"], np.mean([r["loss"] for r in recs[-3:]])
        self.assertAlmostEqual(first, math.log(vocab), delta=0.3)
        self.assertLess(last, 0.5 * first, f"loss {first:.3f} -> {last:.3f}")

    def test_gpt_loss_falls(self):
        torch.set_num_threads(1)
        m = models.init_weights(models.GPT(vocab=64, seq_len=32, hidden=32, heads=2, layers=2), 0)
        self._falls(m, TrainingConfig(global_batch=8, micro_batch=4, lr=3e-3, weight_decay=0.01,
                                      grad_clip=1.0), 64, 32, 60)

    def test_mlp_loss_falls(self):
        m = models.init_weights(models.MlpLM(vocab=64, hidden=32, layers=2), 0)
        self._falls(m, TrainingConfig(global_batch=8, optimizer="sgd", lr=0.5, momentum=0.9),
                    64, 32, 60)


class Weights(unittest.TestCase):
    def test_load_state(self):
        src = models.init_weights(models.GPT(vocab=9, seq_len=4, hidden=4, heads=2, layers=1), 1)
        state = models.state_numpy(src)
        dst = models.load_state(models.GPT(vocab=9, seq_len=4, hidden=4, heads=2, layers=1), state)
        self.assertTrue(all(torch.equal(a, b) for a, b in zip(src.parameters(), dst.parameters())))
        # HF GPT2LMHeadModel spellings: prefix, mask buffers, tied lm_head.
        hf = {"transformer." + k: v for k, v in state.items()}
        hf["transformer.h.0.attn.bias"] = np.ones((1, 1, 4, 4), np.float32)
        hf["lm_head.weight"] = state["wte.weight"].copy()
        models.load_state(dst, hf)
        hf["lm_head.weight"] = hf["lm_head.weight"] + 1
        with self.assertRaisesRegex(ValueError, "lm_head"):
            models.load_state(dst, hf)
        bad = dict(state)
        bad["h.0.mlp.c_fc.weight"] = bad["h.0.mlp.c_fc.weight"].T
        with self.assertRaisesRegex(ValueError, "c_fc.weight.*shape"):
            models.load_state(dst, bad)
        del bad["ln_f.bias"]
        with self.assertRaisesRegex(ValueError, "missing.*ln_f.bias"):
            models.load_state(dst, bad)


class Safetensors(unittest.TestCase):
    def test_round_trip(self):
        rng = np.random.default_rng(0)
        tensors = {
            "a.f32": rng.standard_normal((3, 4)).astype(np.float32),
            "b.f64": rng.standard_normal((2, 1, 3)),
            "c.i32": rng.integers(-9, 9, (5,)).astype(np.int32),
            "d.f16": rng.standard_normal((4,)).astype(np.float16),
            "e.scalar": np.array(2.5, dtype=np.float32),
            "f.empty": np.zeros((0, 3), dtype=np.float32),
        }
        bf = bf16_values = np.array([1.0, -2.5, 3.0e38, 1e-3], dtype=np.float32)
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "x.safetensors")
            st.save(path, dict(tensors, g_bf16=bf), metadata={"format": "pt"},
                    dtype={"g_bf16": "BF16"})
            back, meta = st.load(path)
            self.assertEqual(meta, {"format": "pt"})
            for k, v in tensors.items():
                self.assertEqual(back[k].dtype, v.dtype)
                self.assertTrue(np.array_equal(back[k], v), k)
            self.assertEqual(back["e.scalar"].shape, ())
            np.testing.assert_allclose(back["g_bf16"], bf16_values, rtol=2 ** -8)
            bits, _ = st.load(path, bf16="bits")
            self.assertEqual(bits["g_bf16"].dtype, np.uint16)
            with open(path, "rb") as f:
                (n,) = struct.unpack("<Q", f.read(8))
            self.assertEqual(n % 8, 0)

    def test_bf16_rounding(self):
        vals = np.array([1.0, 1 + 2 ** -8, 1 + 3 * 2 ** -8, -0.0, np.inf, np.nan], dtype=np.float32)
        bits = st.f32_to_bf16_bits(vals)
        self.assertEqual(bits[:5].tolist(), [0x3F80, 0x3F80, 0x3F82, 0x8000, 0x7F80])
        self.assertTrue(np.isnan(st.bf16_bits_to_f32(bits[5:])).all())

    def test_rejects_malformed(self):
        good = st.dumps({"w": np.ones((2, 2), np.float32), "v": np.ones(3, np.float32)})
        (n,) = struct.unpack("<Q", good[:8])
        header = json.loads(good[8:8 + n])

        def with_header(h, data=good[8 + n:]):
            hj = json.dumps(h).encode()
            return struct.pack("<Q", len(hj)) + hj + data

        bad = {
            "short": good[:5],
            "header too long": struct.pack("<Q", 10 ** 6) + good[8:],
            "not json": struct.pack("<Q", 3) + b"{x}" + good[8 + n:],
            "truncated data": good[:-4],
            "bad dtype": with_header(dict(header, w=dict(header["w"], dtype="Q8"))),
            "size mismatch": with_header(dict(header, w=dict(header["w"], shape=[2, 3]))),
            "gap": with_header(dict(header), good[8 + n:] + b"\0" * 4),
            "overlap": with_header(dict(header, w=dict(header["w"], data_offsets=[0, 16]),
                                        v=dict(header["v"], data_offsets=[0, 12]))),
            "negative dim": with_header(dict(header, w=dict(header["w"], shape=[-2, -2]))),
        }
        for what, blob in bad.items():
            with self.assertRaises(st.SafetensorsError, msg=what):
                st.loads(blob, path=what)


class Cli(unittest.TestCase):
    def run_py(self, *args):
        return subprocess.run([PY, *args], capture_output=True, text=True, timeout=120)

    def test_end_to_end(self):
        with tempfile.TemporaryDirectory() as d:
            init, toks = os.path.join(d, "init.safetensors"), os.path.join(d, "tok.bin")
            r = self.run_py(os.path.join(HERE, "make_inputs.py"), "--model-yaml", MLP_YAML,
                            "--init-out", init, "--tokens-out", toks, "--num-tokens", "999")
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertEqual(os.path.getsize(toks), 999 * 2)
            logs = []
            for extra in ([], ["--micro-batch", "2", "--dtype", "float64"]):
                log = os.path.join(d, f"log{len(logs)}.jsonl")
                r = self.run_py(os.path.join(HERE, "train.py"), "--model-yaml", MLP_YAML,
                                "--init", init, "--data", toks, "--steps", "4", "--log", log,
                                *extra)
                self.assertEqual(r.returncode, 0, r.stderr)
                logs.append(log)
            with open(logs[0]) as f:
                recs = [json.loads(line) for line in f]
            self.assertEqual([r["step"] for r in recs], [1, 2, 3, 4])
            self.assertEqual(set(recs[0]), {"step", "loss", "lr", "grad_norm"})
            cmp = os.path.join(HERE, "compare_losses.py")
            r = self.run_py(cmp, *logs, "--fields", "loss,grad_norm")
            self.assertEqual(r.returncode, 0, r.stdout)
            # A perturbed loss and a missing step must both fail.
            worse = os.path.join(d, "worse.jsonl")
            with open(worse, "w") as f:
                for rec in recs:
                    rec["loss"] *= 1 + (3e-4 if rec["step"] == 3 else 0)
                    f.write(json.dumps(rec) + "\n")
            r = self.run_py(cmp, logs[0], worse)
            self.assertEqual(r.returncode, 1)
            self.assertIn("NO", r.stdout)
            with open(logs[0]) as src, open(worse, "w") as f:
                f.writelines(src.readlines()[:3])
            self.assertEqual(self.run_py(cmp, logs[0], worse).returncode, 1)
            # User errors: token out of range, bad spec.
            r = self.run_py(os.path.join(HERE, "train.py"), "--model-yaml", GPT_YAML,
                            "--data", toks, "--data-dtype", "uint32", "--steps", "1")
            self.assertEqual(r.returncode, 1)
            self.assertIn("--data", r.stderr)

    def test_bench_peers(self):
        sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(HERE)), "bench", "peers"))
        import peer_common
        for yml in (GPT_YAML, MLP_YAML):
            m, _ = parse_spec(yml)
            model = models.build_model(m)
            # Matmul parameters = every matrix except lookup-only embeddings
            # (wte counts once: it is also the tied LM head).
            want = sum(p.numel() for n, p in model.named_parameters()
                       if p.dim() == 2 and n not in ("wpe.weight", "embed.weight"))
            self.assertEqual(peer_common.matmul_params(m), want, yml)
        peers = os.path.join(os.path.dirname(os.path.dirname(HERE)), "bench", "peers")
        with tempfile.TemporaryDirectory() as d:
            toks, ddp_log, ref_log = (os.path.join(d, n) for n in ("t.bin", "ddp.jsonl", "ref.jsonl"))
            make_inputs.write_tokens(toks, make_inputs.make_tokens(3000, 128, 4))
            r = self.run_py(os.path.join(peers, "torch_train_bench.py"), "--model-yaml", MLP_YAML,
                            "--data", toks, "--steps", "2", "--warmup", "1")
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertGreater(json.loads(r.stdout)["tokens_per_s"], 0)
            # DDP over 2 ranks must train exactly like one process on the batch.
            r = self.run_py(os.path.join(peers, "torch_ddp_bench.py"), "--model-yaml", MLP_YAML,
                            "--data", toks, "--steps", "2", "--warmup", "1", "--log", ddp_log)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertEqual(json.loads(r.stdout)["world_size"], 2)
            r = self.run_py(os.path.join(HERE, "train.py"), "--model-yaml", MLP_YAML,
                            "--data", toks, "--steps", "3", "--log", ref_log)
            self.assertEqual(r.returncode, 0, r.stderr)
            r = self.run_py(os.path.join(HERE, "compare_losses.py"), ddp_log, ref_log,
                            "--rtol", "1e-6")
            self.assertEqual(r.returncode, 0, r.stdout)

    def test_spec_errors(self):
        with self.assertRaisesRegex(SpecError, "heads"):
            parse_spec("m.yaml", "model: {preset: gpt, vocab: 8, seq_len: 4, hidden: 6, "
                                 "heads: 4, layers: 1}\n")
        with self.assertRaisesRegex(SpecError, "micro_batch"):
            parse_spec("m.yaml", "model: {preset: mlp, vocab: 8, seq_len: 4, hidden: 6, layers: 1}\n"
                                 "training: {global_batch: 8, micro_batch: 3}\n")
        with self.assertRaisesRegex(SpecError, "total_steps"):
            parse_spec("m.yaml", "model: {preset: mlp, vocab: 8, seq_len: 4, hidden: 6, layers: 1}\n"
                                 "training: {schedule: cosine}\n")
        m, t = parse_spec(GPT_YAML)
        self.assertEqual((m.vocab, m.seq_len, m.hidden, m.heads, m.layers, m.ffn_hidden),
                         (512, 64, 64, 4, 2, 256))
        self.assertEqual((t.lr, t.min_lr, t.micro_batch), (1e-3, 1e-4, 4))


if __name__ == "__main__":
    unittest.main(verbosity=2)
