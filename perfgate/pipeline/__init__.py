"""The stages wired together: a workload's gate run, and files analyzed or compared outside one."""
