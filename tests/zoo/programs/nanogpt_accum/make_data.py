"""Synthetic data for nanoGPT's train.py (ours, not upstream).

Writes <run folder>/data/synthetic/{train,val}.bin (uint16 token ids, the format of nanoGPT's
data/*/prepare.py) and meta.pkl (vocab_size, itos, stoi like data/shakespeare_char/prepare.py).
The tokens are random, so nothing is downloaded; train.py is run with --dataset=synthetic.
"""
import os
import pickle
import sys

import numpy as np

VOCAB = 65            # the size of shakespeare_char's vocabulary
TRAIN_TOKENS = 200_000
VAL_TOKENS = 20_000


def main(run_dir: str) -> None:
    out = os.path.join(run_dir, "data", "synthetic")
    os.makedirs(out, exist_ok=True)
    rng = np.random.default_rng(0)
    rng.integers(0, VOCAB, TRAIN_TOKENS, dtype=np.uint16).tofile(os.path.join(out, "train.bin"))
    rng.integers(0, VOCAB, VAL_TOKENS, dtype=np.uint16).tofile(os.path.join(out, "val.bin"))
    chars = [chr(32 + i) for i in range(VOCAB)]
    meta = {"vocab_size": VOCAB, "itos": dict(enumerate(chars)), "stoi": {c: i for i, c in enumerate(chars)}}
    with open(os.path.join(out, "meta.pkl"), "wb") as f:
        pickle.dump(meta, f)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else ".")
