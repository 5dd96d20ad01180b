"""Synthetic image folders for timm's train.py (ours, not upstream).

Writes <run folder>/data/{train,validation}/<class>/<n>.png: small RGB PNG files (noise over a
per-class colour), the ImageFolder layout that train.py reads with --data-dir data. PNG is
written with the standard library (zlib + struct) so the program's own loader decodes them.
"""
import os
import random
import struct
import sys
import zlib

SIZE = 40                      # train.py crops/resizes to --img-size
CLASSES = ("a", "b")
COUNTS = {"train": 1024, "validation": 128}   # images per split, over all classes
# More training images (longer epochs, the same per-sample work): ZOO_TIMM_TRAIN_IMAGES; image n
# repeats image n % 1024's file, so a large folder costs a copy, not a new encode.
TRAIN_IMAGES = int(os.environ.get("ZOO_TIMM_TRAIN_IMAGES", COUNTS["train"]))


def png(width: int, height: int, rows: list) -> bytes:
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    raw = b"".join(b"\x00" + bytes(r) for r in rows)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(raw, 6)) + chunk(b"IEND", b""))


def main(run_dir: str) -> None:
    rng = random.Random(0)
    for split, count in COUNTS.items():
        for i in range(count):
            label = i % len(CLASSES)
            folder = os.path.join(run_dir, "data", split, CLASSES[label])
            os.makedirs(folder, exist_ok=True)
            base = (200, 60, 60) if label == 0 else (60, 60, 200)
            rows = [[max(0, min(255, base[c] + rng.randint(-50, 50))) for _ in range(SIZE) for c in range(3)]
                    for _ in range(SIZE)]
            with open(os.path.join(folder, f"{i:04d}.png"), "wb") as f:
                f.write(png(SIZE, SIZE, rows))
    for i in range(COUNTS["train"], TRAIN_IMAGES):
        label = i % len(CLASSES)
        folder = os.path.join(run_dir, "data", "train", CLASSES[label])
        with open(os.path.join(folder, f"{i % COUNTS['train']:04d}.png"), "rb") as f:
            data = f.read()
        with open(os.path.join(folder, f"{i:05d}.png"), "wb") as f:
            f.write(data)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else ".")
