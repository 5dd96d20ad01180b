"""The gate's settings: their one declaration, pyproject.toml, the command-line options, the workloads."""
