"""Synthetic MNIST for Lightning's examples/pytorch/basics/backbone_image_classifier.py (ours).

The example builds torchvision's MNIST under <run>/examples/Datasets (its DATASETS_PATH, relative
to the script) and lightning.pytorch.demos' MNIST helper first checks ./data (the working
folder): both need the four raw idx files, which torchvision reads as they are (no md5 check on
files already present). The train split must hold 60,000 images (the example splits it
55,000 / 5,000). Images are random noise with random labels; the copy under ./data is a hard link.
"""
import os
import struct
import sys

import numpy as np

FILES = {"train": 60_000, "t10k": 10_000}


def write_idx(folder: str, prefix: str, count: int, rng: np.random.Generator) -> None:
    images = rng.integers(0, 256, size=(count, 28, 28), dtype=np.uint8)
    labels = rng.integers(0, 10, size=count, dtype=np.uint8)
    with open(os.path.join(folder, f"{prefix}-images-idx3-ubyte"), "wb") as f:
        f.write(struct.pack(">IIII", 2051, count, 28, 28))
        f.write(images.tobytes())
    with open(os.path.join(folder, f"{prefix}-labels-idx1-ubyte"), "wb") as f:
        f.write(struct.pack(">II", 2049, count))
        f.write(labels.tobytes())


def main(run_dir: str) -> None:
    rng = np.random.default_rng(0)
    raw = os.path.join(run_dir, "examples", "Datasets", "MNIST", "raw")
    os.makedirs(raw, exist_ok=True)
    for prefix, count in FILES.items():
        write_idx(raw, prefix, count, rng)
    cwd_raw = os.path.join(run_dir, "data", "MNIST", "raw")
    os.makedirs(cwd_raw, exist_ok=True)
    for name in os.listdir(raw):
        target = os.path.join(cwd_raw, name)
        if not os.path.exists(target):
            try:
                os.link(os.path.join(raw, name), target)
            except OSError:
                with open(os.path.join(raw, name), "rb") as src, open(target, "wb") as dst:
                    dst.write(src.read())


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else ".")
