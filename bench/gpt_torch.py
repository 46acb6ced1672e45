"""Giant's GPT in PyTorch, for the benchmarks' PyTorch peers
(bench/train_step_torch.py, bench/scaling_ddp.py): GPT-2 blocks, tied
embedding, AdamW decaying matrices only, with the batch's rows taken from
the input, loaded from
the parameter buffer and token stream a benchmark exported
(bench_torch_export: DIR/params.txt, params.bin, tokens.bin).
"""
import math

import numpy as np
import torch
import torch.nn.functional as F


class Shape:
    """B,T,V,C,NH,L as the benchmarks pass them."""

    def __init__(self, text):
        self.B, self.T, self.V, self.C, self.NH, self.L = (int(x) for x in text.split(","))


def load_params(d, s, device="cpu"):
    """Giant's parameters by name, in Giant's order (layer order, so DDP's
    buckets follow backward); a tied parameter shares an earlier one."""
    flat = np.fromfile(f"{d}/params.bin", dtype=np.float32)
    params = {}
    for line in open(f"{d}/params.txt"):
        name, off, numel, tied, *shape = line.split()
        if int(tied) >= 0:
            continue
        off, numel = int(off), int(numel)
        t = torch.from_numpy(flat[off:off + numel].copy()).reshape([int(x) for x in shape])
        if name.endswith("qkv.w") or name.endswith("qkv.b"):
            t = t.reshape(3 * s.C, -1).squeeze(-1)  # Giant keeps q, k, v as (3, C, ...)
        params[name] = t.to(device)
    return params


def load_tokens(d, s, device="cpu"):
    """The global batch: inputs and targets, (B, T) each."""
    tokens = torch.from_numpy(np.fromfile(f"{d}/tokens.bin", dtype=np.int32).astype(np.int64)).to(device)
    n = s.B * s.T
    return tokens[:n].view(s.B, s.T), tokens[1:n + 1].view(s.B, s.T)


def block(x, p, i, s, mask):
    g = lambda k: p[f"h{i}.{k}"]
    B, T, C = x.shape
    h = F.layer_norm(x, (C,), g("ln1.w"), g("ln1.b"), 1e-5)
    q, k, v = F.linear(h, g("qkv.w"), g("qkv.b")).split(C, dim=2)
    hs = C // s.NH
    q, k, v = (t.view(B, T, s.NH, hs).transpose(1, 2) for t in (q, k, v))
    att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))
    att = att.masked_fill(mask[:, :, :T, :T] == 0, float("-inf"))
    y = (F.softmax(att, dim=-1) @ v).transpose(1, 2).contiguous().view(B, T, C)
    x = x + F.linear(y, g("proj.w"), g("proj.b"))
    h = F.layer_norm(x, (C,), g("ln2.w"), g("ln2.b"), 1e-5)
    h = F.gelu(F.linear(h, g("fc1.w"), g("fc1.b")), approximate="tanh")
    return x + F.linear(h, g("fc2.w"), g("fc2.b"))


def causal_mask(s, device="cpu"):
    return torch.tril(torch.ones(s.T, s.T, device=device)).view(1, 1, s.T, s.T)


def forward(p, idx, targets, s, mask):
    """The mean cross-entropy over the rows given."""
    T = idx.shape[1]
    x = p["embed.wte"][idx] + p["embed.wpe"][:T]
    for i in range(s.L):
        x = block(x, p, i, s, mask)
    x = F.layer_norm(x, (s.C,), p["ln_f.w"], p["ln_f.b"], 1e-5)
    logits = x @ p["embed.wte"].t()
    return F.cross_entropy(logits.view(-1, s.V), targets.reshape(-1))


def optimizer(named):
    """Giant's AdamW: matrices (and embeddings) decay, biases and norms do not."""
    decay = [t for n, t in named if t.dim() == 2]
    rest = [t for n, t in named if t.dim() != 2]
    return torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": rest, "weight_decay": 0.0}],
                             lr=3e-4, betas=(0.9, 0.95), eps=1e-8)
