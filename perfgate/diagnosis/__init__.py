"""Diagnosis: the bottleneck class of a run with its evidence, rule findings with suggestions,
and the attribution of a regression to phases, GPU idle time, rules and kernels.

    diagnose(analysis) -> Diagnosis
    explain_regression(baseline, current, comparisons=None) -> Attribution
    render_diagnosis_text(diagnosis) / render_attribution_text(attribution) -> str
"""
