#!/usr/bin/python3
"""GPT-2's byte-level BPE, written from its published description (OpenAI's
encoder.py), independently of Strata's C++ tokenizer, plus a small trainer
that writes tokenizer files in GPT-2's exact formats.

No GPT-2 vocabulary ships with this machine's packages, so the tests train
one on local English text: the files have GPT-2's formats (vocab.json +
merges.txt as Hugging Face ships them, encoder.json + vocab.bpe as OpenAI
does), the byte alphabet and pre-tokenisation are GPT-2's, only the merges
are learnt from other text.

  /usr/bin/python3 gpt2_bpe.py train --text FILE... --merges 300 --out DIR
  /usr/bin/python3 gpt2_bpe.py encode --tokenizer DIR --text "Hello"   # ids
  /usr/bin/python3 gpt2_bpe.py tokens --tokenizer DIR --text-file F --out t.bin
"""

import argparse
import collections
import json
import os
import sys
import unicodedata

import numpy as np


def bytes_to_unicode():
    """GPT-2's map from bytes to printable characters: printable Latin-1
    bytes stand for themselves, the others for chr(256 + n) in byte order."""
    keep = (list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1))
            + list(range(ord("®"), ord("ÿ") + 1)))
    table, n = {}, 0
    for b in range(256):
        if b in keep:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + n)
            n += 1
    return table


def _is_letter(ch):
    return unicodedata.category(ch).startswith("L")


def _is_number(ch):
    return unicodedata.category(ch).startswith("N")


def _is_space(ch):
    return ch.isspace()


def pretokenize(text):
    """GPT-2's pattern
        's|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+
    applied by hand (Python's re has no \\p{L}); alternatives in order,
    leftmost first, each greedy."""
    out, i, n = [], 0, len(text)
    while i < n:
        match = None
        for c in ("'s", "'t", "'re", "'ve", "'m", "'ll", "'d"):
            if text.startswith(c, i):
                match = c
                break
        if match is None:
            j = i + 1 if text[i] == " " and i + 1 < n else i
            for test in (_is_letter, _is_number,
                         lambda ch: not (_is_space(ch) or _is_letter(ch) or _is_number(ch))):
                if test(text[j]):
                    k = j
                    while k < n and test(text[k]):
                        k += 1
                    match = text[i:k]
                    break
        if match is None:
            k = i
            while k < n and _is_space(text[k]):
                k += 1
            if k < n and k - i > 1:
                k -= 1      # \s+(?!\S): leave the last space to the next word
            match = text[i:k]
        out.append(match)
        i += len(match)
    return out


class Encoder:
    def __init__(self, encoder, merges):
        self.encoder = encoder
        self.decoder = {v: k for k, v in encoder.items()}
        self.ranks = {tuple(m): i for i, m in enumerate(merges)}
        self.byte_encoder = bytes_to_unicode()
        self.byte_decoder = {v: k for k, v in self.byte_encoder.items()}

    @classmethod
    def load(cls, directory):
        for vocab, merges in (("vocab.json", "merges.txt"), ("encoder.json", "vocab.bpe")):
            if os.path.exists(os.path.join(directory, vocab)):
                with open(os.path.join(directory, vocab), encoding="utf-8") as f:
                    encoder = json.load(f)
                with open(os.path.join(directory, merges), encoding="utf-8") as f:
                    lines = f.read().split("\n")
                pairs = [tuple(l.split(" ")) for l in lines
                         if l and not l.startswith("#version")]
                return cls(encoder, pairs)
        raise FileNotFoundError(f"{directory}: no GPT-2 tokenizer files")

    def bpe(self, token):
        word = list(token)
        while len(word) > 1:
            pairs = [(self.ranks.get((a, b), float("inf")), i)
                     for i, (a, b) in enumerate(zip(word, word[1:]))]
            rank, best = min(pairs)
            if rank == float("inf"):
                break
            a, b = word[best], word[best + 1]
            merged, i = [], 0
            while i < len(word):
                if i + 1 < len(word) and word[i] == a and word[i + 1] == b:
                    merged.append(a + b)
                    i += 2
                else:
                    merged.append(word[i])
                    i += 1
            word = merged
        return word

    def encode(self, text):
        ids = []
        for piece in pretokenize(text):
            symbols = "".join(self.byte_encoder[b] for b in piece.encode("utf-8"))
            ids.extend(self.encoder[t] for t in self.bpe(symbols))
        return ids

    def decode(self, ids):
        text = "".join(self.decoder[i] for i in ids)
        return bytearray(self.byte_decoder[c] for c in text).decode("utf-8", errors="replace")


def train(texts, num_merges):
    """Learns `num_merges` merges over GPT-2's pre-tokenised words (the most
    frequent adjacent pair first, ties by the pair itself); returns
    (encoder, merges) with the 256 byte symbols first, as GPT-2's do."""
    byte_encoder = bytes_to_unicode()
    counts = collections.Counter()
    for text in texts:
        for piece in pretokenize(text):
            counts[tuple(byte_encoder[b] for b in piece.encode("utf-8"))] += 1
    words = {w: c for w, c in counts.items()}
    merges = []
    for _ in range(num_merges):
        pairs = collections.Counter()
        for w, c in words.items():
            for a, b in zip(w, w[1:]):
                pairs[(a, b)] += c
        if not pairs:
            break
        best = max(pairs.items(), key=lambda kv: (kv[1], kv[0]))[0]
        merges.append(best)
        merged = {}
        for w, c in words.items():
            out, i = [], 0
            while i < len(w):
                if i + 1 < len(w) and (w[i], w[i + 1]) == best:
                    out.append(w[i] + w[i + 1])
                    i += 2
                else:
                    out.append(w[i])
                    i += 1
            merged[tuple(out)] = merged.get(tuple(out), 0) + c
        words = merged
    encoder = {byte_encoder[b]: i for i, b in enumerate(range(256))}
    for a, b in merges:
        encoder.setdefault(a + b, len(encoder))
    encoder["<|endoftext|>"] = len(encoder)
    return encoder, merges


def write(directory, encoder, merges):
    """Both spellings GPT-2 ships: Hugging Face's vocab.json + merges.txt and
    OpenAI's encoder.json + vocab.bpe (the same contents)."""
    os.makedirs(directory, exist_ok=True)
    text = "#version: 0.2\n" + "".join(f"{a} {b}\n" for a, b in merges)
    for vocab, bpe in (("vocab.json", "merges.txt"), ("encoder.json", "vocab.bpe")):
        with open(os.path.join(directory, vocab), "w", encoding="utf-8") as f:
            json.dump(encoder, f, ensure_ascii=False)
        with open(os.path.join(directory, bpe), "w", encoding="utf-8") as f:
            f.write(text)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("train")
    t.add_argument("--text", nargs="+", required=True)
    t.add_argument("--merges", type=int, default=300)
    t.add_argument("--out", required=True)
    e = sub.add_parser("encode")
    e.add_argument("--tokenizer", required=True)
    e.add_argument("--text", required=True)
    k = sub.add_parser("tokens")
    k.add_argument("--tokenizer", required=True)
    k.add_argument("--text-file", nargs="+", required=True)
    k.add_argument("--out", required=True)
    k.add_argument("--dtype", choices=["uint16", "uint32"], default="uint16")
    args = p.parse_args(argv)
    if args.cmd == "train":
        texts = [open(f, encoding="utf-8", errors="replace").read() for f in args.text]
        write(args.out, *train(texts, args.merges))
    elif args.cmd == "encode":
        print(",".join(map(str, Encoder.load(args.tokenizer).encode(args.text))))
    else:
        enc = Encoder.load(args.tokenizer)
        ids = []
        for f in args.text_file:
            ids.extend(enc.encode(open(f, encoding="utf-8", errors="replace").read()))
        np.asarray(ids, dtype={"uint16": "<u2", "uint32": "<u4"}[args.dtype]).tofile(args.out)
        print(len(ids))
    return 0


if __name__ == "__main__":
    sys.exit(main())
