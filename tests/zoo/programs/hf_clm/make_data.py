"""Synthetic data for transformers' examples/pytorch/language-modeling/run_clm.py (ours).

Writes, under <run folder>/data/:
- train.txt, validation.txt: lines of random words (the script's --train_file/--validation_file);
- tokenizer/: a byte-level GPT-2 tokenizer with no merges (vocab.json of the 256 byte symbols plus
  <|endoftext|>, an empty merges.txt, tokenizer_config.json), loaded with --tokenizer_name, since
  nothing can be downloaded from the hub. Standard library only.
"""
import json
import os
import random
import sys

WORDS = ["alpha", "beta", "gamma", "delta", "river", "stone", "light", "paper", "seven", "north",
         "quiet", "green", "table", "window", "orange", "silver", "market", "garden", "winter", "signal"]


def bytes_to_unicode() -> dict:
    """GPT-2's reversible byte -> printable character table."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, (chr(c) for c in cs)))


def main(run_dir: str) -> None:
    data = os.path.join(run_dir, "data")
    tok = os.path.join(data, "tokenizer")
    os.makedirs(tok, exist_ok=True)
    rng = random.Random(0)
    for name, lines in (("train.txt", 4000), ("validation.txt", 200)):
        with open(os.path.join(data, name), "w") as f:
            for _ in range(lines):
                f.write(" ".join(rng.choice(WORDS) for _ in range(rng.randint(5, 15))) + "\n")
    vocab = {ch: i for i, ch in enumerate(sorted(bytes_to_unicode().values()))}
    vocab["<|endoftext|>"] = len(vocab)
    with open(os.path.join(tok, "vocab.json"), "w") as f:
        json.dump(vocab, f)
    with open(os.path.join(tok, "merges.txt"), "w") as f:
        f.write("#version: 0.2\n")
    with open(os.path.join(tok, "tokenizer_config.json"), "w") as f:
        json.dump({"tokenizer_class": "GPT2Tokenizer", "model_max_length": 1024, "bos_token": "<|endoftext|>",
                   "eos_token": "<|endoftext|>", "unk_token": "<|endoftext|>", "add_prefix_space": False}, f)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else ".")
