"""Reading an nsys SQLite export: NVTX ranges, GPU ops and CUDA API calls as numpy columns."""
