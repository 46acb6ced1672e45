"""Hugging Face's GPT2LMHeadModel as the reference for Giant's safetensors
import and export (test_interop). Nothing is downloaded: the models are
random, from a small configuration.

  hf_gpt2_reference.py make DIR V T C L NH TIED SEED   a random model saved in DIR
  hf_gpt2_reference.py run DIR BATCH OUT               its log-probabilities and loss

BATCH holds int32 B, T, then B*T inputs and B*T targets (-1: none); OUT gets
float32 B*T*V log-probabilities (log_softmax of the logits) and the mean
loss over the targets. Exits 77 when torch, transformers or safetensors is
missing."""
import struct
import sys

try:
    import numpy as np
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel
    import safetensors  # noqa: F401  (save_pretrained writes through it)
except ImportError as e:
    print(f"missing a package: {e}", file=sys.stderr)
    sys.exit(77)


def make(out, V, T, C, L, NH, tied, seed):
    torch.manual_seed(seed)
    cfg = GPT2Config(vocab_size=V, n_positions=T, n_embd=C, n_layer=L, n_head=NH,
                     tie_word_embeddings=bool(tied), resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    m = GPT2LMHeadModel(cfg)
    # Every parameter random, LayerNorms and biases included, so that a
    # tensor put in the wrong place or the wrong layout shows.
    with torch.no_grad():
        for name, p in m.named_parameters():
            if name.endswith("ln_1.weight") or name.endswith("ln_2.weight") or name.endswith("ln_f.weight"):
                p.copy_(1 + 0.2 * torch.randn_like(p))
            else:
                p.copy_(0.1 * torch.randn_like(p))
    m.save_pretrained(out, safe_serialization=True)


def run(d, batch, out):
    m = GPT2LMHeadModel.from_pretrained(d, local_files_only=True)
    m.eval()
    raw = open(batch, "rb").read()
    B, T = struct.unpack("<ii", raw[:8])
    ids = np.frombuffer(raw[8:8 + 4 * B * T], dtype="<i4").reshape(B, T)
    tgt = np.frombuffer(raw[8 + 4 * B * T:8 + 8 * B * T], dtype="<i4").reshape(B, T)
    with torch.no_grad():
        logits = m(torch.tensor(ids.astype(np.int64))).logits.double()
        logp = torch.log_softmax(logits, dim=-1)
        t = torch.tensor(tgt.astype(np.int64))
        mask = t >= 0
        loss = -logp[mask].gather(1, t[mask].unsqueeze(1)).mean()
    with open(out, "wb") as f:
        f.write(logp.float().numpy().astype("<f4").tobytes())
        f.write(struct.pack("<f", float(loss)))


if __name__ == "__main__":
    a = sys.argv[1:]
    if len(a) == 9 and a[0] == "make":
        make(a[1], *map(int, a[2:9]))
    elif len(a) == 4 and a[0] == "run":
        run(a[1], a[2], a[3])
    else:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
