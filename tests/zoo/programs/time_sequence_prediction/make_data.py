"""Small traindata.pt for pytorch/examples' time_sequence_prediction/train.py (ours, not upstream).

Upstream's generate_sine_wave.py writes ``traindata.pt`` in the current folder: a float64 numpy
array of N=100 sine waves of L=1000 samples, ``sin((range(L) + shift) / T)`` with T=20 and a
random integer shift in [-4T, 4T) per wave, saved with ``torch.save(array, file)``. train.py
trains on waves 3.. and tests on waves 0-2. This writes the same format, smaller: N=8 waves of
L=30 samples (5 training waves of 29 steps), so one LBFGS step (up to 20 iterations, 25 closure
calls) takes a fraction of a second on a CPU.

Note: train.py calls ``torch.load('traindata.pt')`` without ``weights_only``; torch >= 2.6 loads
with ``weights_only=True`` by default, which refuses a pickled numpy array (upstream's
requirements.txt pins ``torch<2.6``). Run it with ``TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1`` in the
environment (see zoo.toml ``env``).

Usage: python make_data.py <run folder>   (writes <run folder>/traindata.pt)
"""
import os
import sys

import numpy as np
import torch

T = 20
L = 30
N = 8


def main(run_folder):
    rng = np.random.RandomState(2)
    x = np.empty((N, L), "int64")
    x[:] = np.array(range(L)) + rng.randint(-4 * T, 4 * T, N).reshape(N, 1)
    data = np.sin(x / 1.0 / T).astype("float64")
    path = os.path.join(run_folder, "traindata.pt")
    with open(path, "wb") as fh:
        torch.save(data, fh)
    print(f"{N} sine waves of {L} samples in {path}")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python make_data.py <run folder>")
    main(sys.argv[1])
