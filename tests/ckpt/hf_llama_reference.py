"""Hugging Face's LlamaForCausalLM as the reference for Giant's safetensors
import and export under the hf-llama names (test_interop). Nothing is
downloaded: the models are random, from a small configuration.

  hf_llama_reference.py make DIR V C L NH NKV H THETA SEED   a random model saved in DIR
  hf_llama_reference.py run DIR BATCH OUT                    its log-probabilities and loss

The model is untied, with RMSNorm epsilon 1e-5 (Giant's). BATCH holds int32
B, T, then B*T inputs and B*T targets (-1: none); OUT gets float32 B*T*V
log-probabilities (log_softmax of the logits) and the mean loss over the
targets. Exits 77 when torch, transformers or safetensors is missing."""
import struct
import sys

try:
    import numpy as np
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM
    import safetensors  # noqa: F401  (save_pretrained writes through it)
except ImportError as e:
    print(f"missing a package: {e}", file=sys.stderr)
    sys.exit(77)


def make(out, V, C, L, NH, NKV, H, theta, seed):
    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=V, hidden_size=C, intermediate_size=H, num_hidden_layers=L,
                      num_attention_heads=NH, num_key_value_heads=NKV, rms_norm_eps=1e-5,
                      rope_theta=float(theta), max_position_embeddings=64, tie_word_embeddings=False,
                      hidden_act="silu", attention_dropout=0.0)
    m = LlamaForCausalLM(cfg)
    # Every parameter random, the norms' weights included, so that a tensor
    # put in the wrong place or the wrong layout shows.
    with torch.no_grad():
        for name, p in m.named_parameters():
            if name.endswith("layernorm.weight") or name == "model.norm.weight":
                p.copy_(1 + 0.2 * torch.randn_like(p))
            else:
                p.copy_(0.1 * torch.randn_like(p))
    m.save_pretrained(out, safe_serialization=True)


def run(d, batch, out):
    m = LlamaForCausalLM.from_pretrained(d, local_files_only=True, torch_dtype=torch.float32,
                                         attn_implementation="eager")
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
    if len(a) == 10 and a[0] == "make":
        make(a[1], *map(int, a[2:8]), float(a[8]), int(a[9]))
    elif len(a) == 4 and a[0] == "run":
        run(a[1], a[2], a[3])
    else:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
