#!/usr/bin/env python3
"""The reference for test_bpe: Hugging Face's tokenizers encoding a corpus.

  bpe_reference.py TOKENIZER.json BYTES.tok OUT.ids
  bpe_reference.py --gpt2-layout OUT.json CORPUS_DIR

BYTES.tok is giant-tokenize's byte-level token file of the corpus (ids
0..255 bytes, 256 the end of a record), so both sides see the same
records. Each record is decoded as Python does with errors="replace" and
encoded with tokenizers (no post-processor's tokens), followed by the
vocabulary's end-of-text token as giant-tokenize picks it. OUT.ids gets
the ids, 4 bytes little-endian each. Exit 77 when tokenizers is missing.

--gpt2-layout trains a small vocabulary laid out as GPT-2's published
tokenizer.json is: <|endoftext|> an added token with the last id, not in
the model's vocabulary, and a ByteLevel post-processor.
"""
import struct
import sys

try:
    from tokenizers import Tokenizer
except ImportError:
    print("bpe_reference.py: cannot import tokenizers (tools/deps.sh giant_install_py_deps)", file=sys.stderr)
    sys.exit(77)

EOT_NAMES = ["<|endoftext|>", "<|end_of_text|>", "</s>"]


def records(path):
    data = open(path, "rb").read()
    width, count = struct.unpack_from("<IQ", data, 12)
    assert width == 2, "expected a byte-level token file"
    ids = struct.unpack_from("<%dH" % count, data, 64)
    cur = bytearray()
    for t in ids:
        if t == 256:
            yield bytes(cur)
            cur = bytearray()
        else:
            cur.append(t)
    if cur:
        yield bytes(cur)


def gpt2_layout(out, corpus):
    import os
    from tokenizers import decoders, models, pre_tokenizers, processors, trainers
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=True)
    names = sorted(n for n in os.listdir(corpus) if not n.endswith((".dat", ".u8")))
    texts = [open(os.path.join(corpus, n), "rb").read().decode("utf-8", errors="replace") for n in names]
    trainer = trainers.BpeTrainer(vocab_size=1000, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(texts, trainer=trainer)
    tok.add_special_tokens(["<|endoftext|>"])
    tok.save(out)


def main():
    if sys.argv[1] == "--gpt2-layout":
        gpt2_layout(sys.argv[2], sys.argv[3])
        return
    tok = Tokenizer.from_file(sys.argv[1])
    vocab = tok.get_vocab(with_added_tokens=True)
    eot = next((vocab[n] for n in EOT_NAMES if n in vocab), None)
    texts = [r.decode("utf-8", errors="replace") for r in records(sys.argv[2])]
    out = []
    for enc in tok.encode_batch(texts, add_special_tokens=False):
        out.extend(enc.ids)
        if eot is not None:
            out.append(eot)
    with open(sys.argv[3], "wb") as f:
        f.write(struct.pack("<%dI" % len(out), *out))
    print("bpe_reference.py: %d records, %d ids" % (len(texts), len(out)))


if __name__ == "__main__":
    main()
