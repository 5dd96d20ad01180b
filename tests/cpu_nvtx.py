"""NVTX ranges for the tests' small CPU workloads without importing torch.

Under nsys (2022.4 on the 2-core CI machine) a workload that imports torch takes 11.7 s to capture
where the same sleep loop with these ranges takes 2.7 s (``nsys profile -t nvtx,osrt`` of 14 steps
of 30 ms, measured 2026-11-29), and these workloads use torch for nothing but ``torch.cuda.nvtx``.
``NVTX`` is source text that defines ``nvtx.range_push`` / ``nvtx.range_pop`` from the NVTX
library torch's own binding calls (``libnvtx3interop`` or ``libnvToolsExt`` in torch's ``nvidia``
wheels), loaded with ctypes; where none is found it falls back on ``torch.cuda.nvtx``. (The ``nvtx``
package from PyPI is no substitute: nsys 2022.4 records no ranges from it for CPU processes.)
"""
from __future__ import annotations

#: Replaces ``import torch`` + ``nvtx = torch.cuda.nvtx`` in a workload's source (no braces: the
#: workloads' templates go through str.format).
NVTX = '''\
def _nvtx():
    import ctypes, glob, importlib.util, os, types
    spec = importlib.util.find_spec("nvidia")
    for root in (spec.submodule_search_locations if spec is not None else []):
        for name in ("libnvtx3interop.so*", "libnvToolsExt.so*"):
            for path in sorted(glob.glob(os.path.join(root, "*", "lib", name))):
                lib = ctypes.CDLL(path)
                return types.SimpleNamespace(range_push=lambda text: lib.nvtxRangePushA(text.encode()),
                                             range_pop=lambda: lib.nvtxRangePop())
    import torch
    return torch.cuda.nvtx


nvtx = _nvtx()
'''
