"""The machine and the tools perfgate drives: nsys, the GPU and driver, the processes it starts."""
