"""Automatic NVTX ranges for code without them (``PERFGATE_AUTOSTEP=1``)."""
