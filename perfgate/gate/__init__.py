"""The gate's decision: metric specs and tolerances, statistics, the comparison with a baseline,
sequential looks, baselines and their provenance."""
