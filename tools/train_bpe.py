#!/usr/bin/env python3
"""Trains a byte-level BPE vocabulary with Hugging Face's tokenizers and
writes its tokenizer.json, for giant-tokenize --tokenizer (docs/interop.md).

  python3 tools/train_bpe.py [--vocab-size N] [--kind gpt2|llama3] OUT.json INPUT...

An INPUT directory stands for its regular files, fortune index files
(*.dat, *.u8) left out. --kind gpt2 (the default) pre-tokenizes with
GPT-2's ByteLevel pattern; llama3 with Llama 3's Split pattern followed by
ByteLevel without its own. Either way <|endoftext|> is the vocabulary's
end-of-text token, which giant-tokenize writes between documents.
Needs: pip install tokenizers==0.15.2 (tools/deps.sh installs it).
"""
import argparse
import os
import sys

LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
                  r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")


def files(inputs):
    for path in inputs:
        if os.path.isdir(path):
            for name in sorted(os.listdir(path)):
                full = os.path.join(path, name)
                if os.path.isfile(full) and not name.endswith((".dat", ".u8")):
                    yield full
        else:
            yield path


def texts(inputs):
    for path in files(inputs):
        with open(path, "rb") as f:
            yield f.read().decode("utf-8", errors="replace")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--vocab-size", type=int, default=4096)
    ap.add_argument("--kind", choices=["gpt2", "llama3"], default="gpt2")
    ap.add_argument("out")
    ap.add_argument("inputs", nargs="+")
    a = ap.parse_args()
    try:
        from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
    except ImportError:
        sys.exit("train_bpe.py: needs the tokenizers package: pip install tokenizers==0.15.2")
    tok = Tokenizer(models.BPE())
    if a.kind == "gpt2":
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    else:
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(LLAMA3_PATTERN), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=a.vocab_size, special_tokens=["<|endoftext|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(texts(a.inputs), trainer=trainer)
    tok.save(a.out)
    print("train_bpe.py: wrote %s: %d tokens" % (a.out, tok.get_vocab_size()))


if __name__ == "__main__":
    main()
