"""perfgate: a CI performance regression gate for PyTorch training under Nsight Systems.

Importing perfgate is cheap (no pandas, no torch): workloads import ``perfgate.nvtx``.
"""
__version__ = "0.1.0"
