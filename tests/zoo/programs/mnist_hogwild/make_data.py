"""Synthetic MNIST for pytorch/examples' mnist_hogwild (main.py, train.py) (ours, not upstream).

The program reads ``datasets.MNIST('../data', ...)`` relative to the folder it runs in, so the data
goes to the PARENT of the run folder: ``<run folder>/../data/MNIST/raw/``. torchvision (0.17 and
later, checked on 0.28) takes the dataset as present, and downloads nothing, when the four
uncompressed idx files below exist there (``MNIST._check_exists``: ``check_integrity`` of each
resource name without ``.gz``, no checksum). Sizes: 2000 training and 500 test images of 28x28
(1.6 MB + 0.4 MB), labels 0-9; each image is its class's random stroke pattern plus noise.

Deterministic (fixed seed): several programs that share ``../data`` (mnist, vae, mnist_hogwild)
write the same bytes; each file is written to a temporary name and renamed into place.

Usage: python make_data.py <run folder>
"""
import os
import struct
import sys

import numpy as np

N_TRAIN, N_TEST = 2000, 500


def _images(rng, protos, n):
    labels = rng.integers(0, 10, n).astype(np.uint8)
    noise = rng.random((n, 28, 28))
    imgs = np.where(protos[labels], 200 + 55 * noise, 40 * noise * (noise > 0.8))
    return imgs.astype(np.uint8), labels


def _write(path, magic, dims, payload):
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "wb") as fh:
        fh.write(struct.pack(">I", magic))
        for d in dims:
            fh.write(struct.pack(">I", d))
        fh.write(payload.tobytes())
    os.replace(tmp, path)


def main(run_folder):
    raw = os.path.join(os.path.dirname(os.path.abspath(run_folder)), "data", "MNIST", "raw")
    os.makedirs(raw, exist_ok=True)
    rng = np.random.default_rng(20240901)
    protos = rng.random((10, 28, 28)) < 0.18
    for prefix, n in (("train", N_TRAIN), ("t10k", N_TEST)):
        imgs, labels = _images(rng, protos, n)
        _write(os.path.join(raw, f"{prefix}-images-idx3-ubyte"), 0x803, (n, 28, 28), imgs)
        _write(os.path.join(raw, f"{prefix}-labels-idx1-ubyte"), 0x801, (n,), labels)
    print(f"synthetic MNIST ({N_TRAIN} train, {N_TEST} test) in {raw}")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python make_data.py <run folder>")
    main(sys.argv[1])
