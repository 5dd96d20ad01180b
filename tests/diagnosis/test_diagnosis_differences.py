"""The kernel claims of one place (perfgate.diagnosis.differences.kernel_reason), each held against a
case that satisfies its predicate and one that does not (docs/diagnosis.md, "Every claim and the
predicate that allows it"). Kernels per place: name -> [launches, ms] per step."""
from __future__ import annotations

from perfgate.diagnosis.differences import kernel_reason

GEMM = "sm90_xmma_gemm_f32f32_tf32f32_f32_tn_n_kernel"
NORM = "vectorized_layer_norm_kernel"
FUSED = "multi_tensor_apply_kernel<TensorListMetadata<4>, FusedAdamMathFunctor>"
ADD = "vectorized_elementwise_kernel<add>"
BASE = {GEMM: [100.0, 2.0], NORM: [40.0, 0.4]}


def _reason(base: dict, cur: dict, where: str = "backward", host_ms: float = 0.0, host_bound: bool = False):
    return kernel_reason(where, base, cur, host_ms, host_bound, 0.0)


def test_more_of_the_same_kernels_is_more_layers_or_calls() -> None:
    more = _reason(BASE, {GEMM: [150.0, 3.0], NORM: [60.0, 0.6]})
    assert more is not None and more.mechanism == "kernel_launches"
    assert more.text.startswith("+70 kernel launches/step in backward, the same kernels more often")
    assert more.text.endswith("+1.20 ms/step GPU time): more layers or calls?") and abs(more.ms - 1.2) < 1e-9
    # 2 more launches of 140 is under 2 % of them: the same work, its GPU time run longer
    assert _reason(BASE, {GEMM: [102.0, 3.0], NORM: [40.0, 0.4]}).mechanism == "kernels_longer"


def test_the_same_launches_running_longer_is_larger_shapes() -> None:
    longer = _reason(BASE, {GEMM: [100.0, 2.6], NORM: [40.0, 0.45]})
    assert longer is not None and longer.mechanism == "kernels_longer"
    assert longer.text.startswith("kernels in backward run longer at the same launches: +0.65 ms/step GPU time (")
    assert longer.text.endswith("): larger shapes?")
    # 0.06 ms more of 2.4: under 3 % of the place's GPU time, noise
    assert _reason(BASE, {GEMM: [100.0, 2.06], NORM: [40.0, 0.4]}) is None


def test_a_fused_optimizer_replaced_by_per_parameter_kernels() -> None:
    base = {FUSED: [4.0, 0.2]}
    unfused = {ADD: [160.0, 0.8]}
    told = _reason(base, unfused, where="optimizer")
    assert told is not None and told.cause == "optimizer implementation"
    assert told.text.startswith("+156 kernel launches/step in optimizer (")
    assert "gone: " in told.text and told.text.endswith("the optimizer's fused/foreach implementation is no longer used?")
    # the same change outside an optimizer phase is new kernels, not the optimizer's implementation
    assert _reason(base, unfused, where="backward").mechanism == "kernels_added"


def test_a_host_bound_step_credits_added_launches_up_to_their_cost() -> None:
    """On a host-bound step the place's host time counts as far as 0.1 ms a launch added covers it:
    kernels replaced one for one (cuDNN picking another algorithm) cost the host nothing more."""
    cur = {GEMM: [150.0, 2.1], NORM: [60.0, 0.45]}
    assert abs(_reason(BASE, cur, host_ms=9.0, host_bound=True).ms - 7.0) < 1e-9    # 70 launches x 0.1 ms
    assert abs(_reason(BASE, cur, host_ms=3.0, host_bound=True).ms - 3.0) < 1e-9    # the place's own host time
    assert abs(_reason(BASE, cur, host_ms=9.0, host_bound=False).ms - 0.15) < 1e-9   # GPU time alone


# ----------------------------------------------------------------------------- a faster run


def test_a_faster_run_names_the_kernels_and_synchronizations_it_lost() -> None:
    from perfgate.diagnosis.faster import FASTER_KERNELS, faster_differences

    base = {"backward": {GEMM: [100.0, 2.0], ADD: [40.0, 0.8]}}
    cur = {"backward": {GEMM: [100.0, 2.0]}}
    found = faster_differences(base, cur, {"the step's own code (outside its phases)": 3.0}, {}, {}, False, -1.5)
    kernels = next(r for r in found if r.mechanism == FASTER_KERNELS)
    assert kernels.text.startswith("backward: -40 kernel launches/step, -0.80 ms/step GPU time (")
    assert abs(kernels.ms - 0.8) < 1e-9
    syncs = next(r for r in found if r.mechanism == "syncs")
    assert syncs.text == ("fewer host-GPU synchronizations in the step's own code (outside its phases): -3/step; "
                          "the GPU idles -1.50 ms/step") and syncs.ms == 1.5
    # the GPU idles no less: fewer synchronizations saved nothing, and are no reason
    assert not any(r.mechanism == "syncs" for r in faster_differences(
        base, cur, {"the step's own code (outside its phases)": 3.0}, {}, {}, False, 0.2))
    # the same kernels and no synchronization fewer: nothing of this kind to tell
    assert faster_differences(base, base, {}, {}, {}, False, -1.0) == []


def test_the_model_phases_kernel_changes_are_one_reason_led_by_the_most_telling() -> None:
    """forward's new kernels lead backward's extra launches (kernels_added before kernel_launches);
    the milliseconds add up; the follower keeps its evidence and loses its guess."""
    from perfgate.diagnosis.differences import differences

    base = {"forward": {GEMM: [50.0, 1.0]}, "backward": {GEMM: [100.0, 2.0], ADD: [8.0, 0.1]},
            "optimizer": {ADD: [10.0, 0.1]}}
    cur = {"forward": {GEMM: [50.0, 1.0], "dropout_kernel": [12.0, 0.3]},
           "backward": {GEMM: [100.0, 2.0], ADD: [32.0, 0.3]}, "optimizer": {ADD: [10.0, 0.1]}}
    found = differences(base, cur, {}, {}, {}, False, 0.0, 0.0, 0.0, 0.0)
    assert len(found) == 1, found
    told = found[0]
    assert told.mechanism == "kernels_added" and told.where == "forward" and abs(told.ms - 0.5) < 1e-9
    assert told.text.startswith("new kernels in forward: dropout_kernel +12/step")
    assert told.text.endswith("; also +24 kernel launches/step in backward, the same kernels more often "
                              "(vectorized_elementwise_kernel<add> +24/step; +0.20 ms/step GPU time)"), told.text
    # a change in one model phase alone stays that phase's, with its own guess
    alone = differences(base, {**cur, "backward": base["backward"]}, {}, {}, {}, False, 0.0, 0.0, 0.0, 0.0)
    assert [r.where for r in alone] == ["forward"] and "; also" not in alone[0].text


# ----------------------------------------------------------------------------- nothing located


def test_a_change_no_difference_locates_says_so() -> None:
    """Without a reason the account says nothing located the change (with the phase time the traces
    do not place, when there is some), never beside a listed reason."""
    from perfgate.diagnosis.account import first_reason
    from perfgate.diagnosis.render import _reason_lines

    assert first_reason([], 0.4) == ("no difference between the traces accounts for the +0.40 ms/step: no phase, "
                                     "kernel, synchronization or copy changed by more than noise", None)
    assert first_reason([], -0.4) == ("no difference between the traces accounts for the -0.40 ms/step", None)
    unlocated = [{"text": "forward +1.2 ms/step of host time"}]
    assert _reason_lines({"step_mean_delta_ms": 0.4, "reasons": [], "unlocated": unlocated}) == [
        "explained: none of the +0.40 ms/step: no phase, kernel, synchronization or copy changed by more than "
        "noise; phase time no difference locates: forward +1.2 ms/step"]
    listed = _reason_lines({"step_mean_delta_ms": 0.4, "explained_ms": 0.3, "unlocated": unlocated,
                            "reasons": [{"text": "new kernels in forward: …", "ms": 0.3}]})
    assert listed[0] == ("explained: 0.30 of +0.40 ms/step (75%); unexplained 0.10 ms/step; phase time no "
                         "difference locates: forward +1.2 ms/step")
    assert not any("explained: none" in line for line in listed)
    assert _reason_lines({"step_mean_delta_ms": 0.0, "reasons": []}) == []


def test_the_steps_own_code_is_a_reason_only_where_nothing_locates_it() -> None:
    from perfgate.records.facts import STEP_CODE
    from perfgate.diagnosis.host import host_reasons
    from perfgate.records.diagnosis import PhaseDelta

    forward = PhaseDelta("forward", 5.0, 5.0)
    gpu = host_reasons([forward], 0.8, set(), 1.0, True)
    assert [(r.where, r.text) for r in gpu] == [
        (STEP_CODE, "the step's own code (outside its phases) +0.8 ms/step (host work, or the wait for the GPU's work "
                    "at the step's end)")]
    assert host_reasons([forward], 0.8, set(), 1.0, False)[0].text == \
        "the step's own code (outside its phases) +0.8 ms/step of host time"
    assert host_reasons([forward], 0.8, {STEP_CODE}, 1.0, True) == []       # a kernel reason located it
    assert host_reasons([forward], 0.04, set(), 1.0, True) == []            # under 0.05 ms/step
    assert host_reasons([forward], 0.3, set(), 20.0, True) == []            # under 2 % of a +20 ms change
    assert host_reasons([forward], -0.8, set(), 1.0, True) == []            # against the change's direction
