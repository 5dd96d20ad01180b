"""The batch modes of the ``perfgate`` command: ab, calibrate, history, compare's inputs."""
