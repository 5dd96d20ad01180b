"""The gate's decision: metric specs and tolerances, statistics, the comparison with a baseline's
launches, sequential and paired looks, change points."""
