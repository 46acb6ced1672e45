"""Giant's Llama (examples/llama) as a plain torch.nn.Module, for
bench/train_step_torch.py: RMSNorm, grouped-query attention with rotary
embeddings in Hugging Face's rotate-half layout, SwiGLU, untied head, no
biases. Its submodules are named as Hugging Face's LlamaForCausalLM, so
its parameter names are Giant's but for the embedding (wte) and the head
(w) (docs/llama.md); loaded from the parameter buffer and token stream a
benchmark exported (bench_torch_export: DIR/params.txt, params.bin,
tokens.bin). The module-level functions are gpt_torch.py's, so the peer
runs either model.
"""
import math

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

EPS = 1e-5
THETA = 10000.0


class Shape:
    """B,T,V,C,NH,L,NKV,H as bench_train_step --model llama passes them."""

    def __init__(self, text):
        self.B, self.T, self.V, self.C, self.NH, self.L, self.NKV, self.H = (int(x) for x in text.split(","))


class RMSNorm(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(c))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + EPS) * self.weight


def rotate(x, cos, sin):
    """Hugging Face's rotate-half RoPE on (B, heads, T, hs)."""
    half = x.shape[-1] // 2
    x0, x1 = x[..., :half], x[..., half:]
    return torch.cat((x0 * cos - x1 * sin, x1 * cos + x0 * sin), dim=-1)


class Attention(nn.Module):
    def __init__(self, s):
        super().__init__()
        hs = s.C // s.NH
        self.s, self.hs = s, hs
        self.q_proj = nn.Linear(s.C, s.C, bias=False)
        self.k_proj = nn.Linear(s.C, s.NKV * hs, bias=False)
        self.v_proj = nn.Linear(s.C, s.NKV * hs, bias=False)
        self.o_proj = nn.Linear(s.C, s.C, bias=False)

    def forward(self, x, cos, sin, mask):
        B, T, C = x.shape
        s, hs = self.s, self.hs
        q = self.q_proj(x).view(B, T, s.NH, hs).transpose(1, 2)
        k = self.k_proj(x).view(B, T, s.NKV, hs).transpose(1, 2)
        v = self.v_proj(x).view(B, T, s.NKV, hs).transpose(1, 2)
        q, k = rotate(q, cos, sin), rotate(k, cos, sin)
        # query head h reads key/value head h // (NH / NKV)
        k = k.repeat_interleave(s.NH // s.NKV, dim=1)
        v = v.repeat_interleave(s.NH // s.NKV, dim=1)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))
        att = att.masked_fill(mask[:, :, :T, :T] == 0, float("-inf"))
        y = (F.softmax(att, dim=-1) @ v).transpose(1, 2).contiguous().view(B, T, C)
        return self.o_proj(y)


class MLP(nn.Module):
    def __init__(self, s):
        super().__init__()
        self.gate_proj = nn.Linear(s.C, s.H, bias=False)
        self.up_proj = nn.Linear(s.C, s.H, bias=False)
        self.down_proj = nn.Linear(s.H, s.C, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Layer(nn.Module):
    def __init__(self, s):
        super().__init__()
        self.input_layernorm = RMSNorm(s.C)
        self.self_attn = Attention(s)
        self.post_attention_layernorm = RMSNorm(s.C)
        self.mlp = MLP(s)

    def forward(self, x, cos, sin, mask):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, mask)
        return x + self.mlp(self.post_attention_layernorm(x))


class Body(nn.Module):
    def __init__(self, s):
        super().__init__()
        self.embed_tokens = nn.Embedding(s.V, s.C)
        self.layers = nn.ModuleList(Layer(s) for _ in range(s.L))
        self.norm = RMSNorm(s.C)


class Llama(nn.Module):
    def __init__(self, s):
        super().__init__()
        self.s = s
        self.model = Body(s)
        self.lm_head = nn.Linear(s.C, s.V, bias=False)
        hs = s.C // s.NH
        # the angles in double, as Giant's kernels compute them
        inv = THETA ** (-torch.arange(0, hs // 2, dtype=torch.float64) * 2.0 / hs)
        ang = torch.arange(s.T, dtype=torch.float64)[:, None] * inv[None, :]
        self.register_buffer("cos", ang.cos().float(), persistent=False)
        self.register_buffer("sin", ang.sin().float(), persistent=False)

    def forward(self, idx, targets, mask):
        T = idx.shape[1]
        cos, sin = self.cos[:T], self.sin[:T]
        x = self.model.embed_tokens(idx)
        for layer in self.model.layers:
            x = layer(x, cos, sin, mask)
        logits = self.lm_head(self.model.norm(x))
        return F.cross_entropy(logits.view(-1, self.s.V), targets.reshape(-1))


# Giant's names for the two that differ from the module's.
GIANT_NAME = {"model.embed_tokens.weight": "model.embed_tokens.wte", "lm_head.weight": "lm_head.w"}
MODEL = None


def load_params(d, s, device="cpu"):
    """A fresh module with Giant's weights; its parameters by name, in
    Giant's order. forward runs the module these last came from."""
    global MODEL
    flat = np.fromfile(f"{d}/params.bin", dtype=np.float32)
    giant = {}
    for line in open(f"{d}/params.txt"):
        name, off, numel, tied, *shape = line.split()
        off, numel = int(off), int(numel)
        giant[name] = torch.from_numpy(flat[off:off + numel].copy()).reshape([int(x) for x in shape])
    MODEL = Llama(s).to(device)
    with torch.no_grad():
        for name, p in MODEL.named_parameters():
            p.copy_(giant[GIANT_NAME.get(name, name)])
    by_name = dict(MODEL.named_parameters())
    order = [GIANT_NAME.get(n, n) for n in by_name]
    inverse = {v: k for k, v in GIANT_NAME.items()}
    return {inverse.get(n, n): by_name[inverse.get(n, n)] for n in sorted(order, key=list(giant).index)}


def load_tokens(d, s, device="cpu"):
    """The global batch: inputs and targets, (B, T) each."""
    tokens = torch.from_numpy(np.fromfile(f"{d}/tokens.bin", dtype=np.int32).astype(np.int64)).to(device)
    n = s.B * s.T
    return tokens[:n].view(s.B, s.T), tokens[1:n + 1].view(s.B, s.T)


def causal_mask(s, device="cpu"):
    return torch.tril(torch.ones(s.T, s.T, device=device)).view(1, 1, s.T, s.T)


def forward(p, idx, targets, s, mask):
    """The mean cross-entropy over the rows given (p: load_params' module's)."""
    return MODEL(idx, targets, mask)


def optimizer(named):
    """Giant's AdamW: matrices (and embeddings) decay, norms do not."""
    named = list(named)
    decay = [t for n, t in named if t.dim() == 2]
    rest = [t for n, t in named if t.dim() != 2]
    return torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": rest, "weight_decay": 0.0}],
                             lr=3e-4, betas=(0.9, 0.95), eps=1e-8)
