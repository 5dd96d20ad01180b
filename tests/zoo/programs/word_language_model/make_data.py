"""Synthetic wikitext-2-like corpus for pytorch/examples' word_language_model (ours, not upstream).

main.py reads ``--data`` (default ``./data/wikitext-2``, relative to the folder it runs in):
``train.txt``, ``valid.txt`` and ``test.txt``, whitespace-separated words, one paragraph a line
(data.py appends ``<eos>`` to each line). Upstream commits the real WikiText-2 (about 13 MB); we
write a small deterministic stand-in instead: 1000 made-up words drawn with Zipf-like
frequencies, wikitext-style `` = Heading = `` lines, ``<unk>`` and ``@-@`` tokens.

Sizes (tokens with <eos>): train 10 000, valid 3 000, test 3 000 (about 0.1 MB in all).

Usage: python make_data.py <run folder>   (writes <run folder>/data/wikitext-2/*.txt)
"""
import os
import sys

import numpy as np

VOCAB = 1000
TOKENS = {"train.txt": 10000, "valid.txt": 3000, "test.txt": 3000}


def _words(rng):
    letters = np.array(list("etaoinshrdlucmfwypvbgkqjxz"))
    words = set()
    while len(words) < VOCAB - 3:
        n = int(rng.integers(2, 10))
        words.add("".join(rng.choice(letters, n)))
    return sorted(words) + ["<unk>", "@-@", "the"]


def _text(rng, words, probs, n_tokens):
    lines, count = [], 0
    while count < n_tokens:
        if rng.random() < 0.1:
            title = " ".join(rng.choice(words[:200], int(rng.integers(1, 4))))
            line = f" = {title} = "
            count += len(line.split()) + 1
        else:
            n = int(rng.integers(20, 120))
            n = min(n, max(1, n_tokens - count - 1))
            line = " " + " ".join(rng.choice(words, n, p=probs)) + " . "
            count += len(line.split()) + 1
        lines.append(line)
    return "\n".join(lines) + "\n"


def main(run_folder):
    out = os.path.join(run_folder, "data", "wikitext-2")
    os.makedirs(out, exist_ok=True)
    rng = np.random.default_rng(1234)
    words = _words(rng)
    ranks = np.arange(1, len(words) + 1, dtype=np.float64)
    probs = 1.0 / ranks
    probs /= probs.sum()
    for name, n_tokens in TOKENS.items():
        with open(os.path.join(out, name), "w", encoding="utf8") as fh:
            fh.write(_text(rng, words, probs, n_tokens))
    print(f"synthetic wikitext-2 in {out}")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python make_data.py <run folder>")
    main(sys.argv[1])
