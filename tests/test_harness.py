"""The harness's comparison with AR: speedup, identity, and where a row first differs."""

from __future__ import annotations

from specdec.harness import MethodResult, compare_to_ar, first_difference


def result(method: str, tps: float) -> MethodResult:
    return MethodResult(method, "humaneval", 2, 2, 10, 1.0, tps, 1.0, 1.0, {1: 10})


def test_first_difference():
    assert first_difference([1, 2, 3], [1, 2, 3]) is None
    assert first_difference([1, 2, 3], [1, 5, 3]) == 1
    assert first_difference([1, 2], [1, 2, 9]) == 2  # one row stopped (EOS) where the other did not


def test_compare_to_ar_reports_rows_and_first_token():
    results = [result("ar", 100.0), result("tree", 150.0), result("chain", 50.0)]
    key = ("humaneval", 2)
    outputs = {("ar",) + key: [[1, 2, 3], [4, 5, 6]], ("tree",) + key: [[1, 2, 3], [4, 5, 6]],
               ("chain",) + key: [[1, 2, 7], [4, 5, 6]]}
    compare_to_ar(results, outputs)
    ar, tree, chain = results
    assert tree.identical_to_ar and tree.speedup_vs_ar == 1.5 and tree.identity_note() == "yes"
    assert not chain.identical_to_ar and chain.rows_differing_from_ar == 1 and chain.first_difference_at == [2]
    assert chain.identity_note() == "1 rows differ (first at token 2)"


def test_speedup_by_round_pairs_each_round_with_ars():
    """Round k's speedup is tokens/s against AR's in round k: a machine slow in round 1 for both cancels,
    where the best-of speedup compares each method's fastest round."""
    ar, tree = result("ar", 10.0), result("tree", 10.0)
    ar.round_seconds, tree.round_seconds = [2.0, 1.0, 1.0], [1.6, 0.5, 1.25]  # the same 10 tokens per round
    compare_to_ar([ar, tree], {("ar", "humaneval", 2): [[1]], ("tree", "humaneval", 2): [[1]]})
    assert ar.speedup_by_round == [1.0, 1.0, 1.0] and tree.speedup_by_round == [1.25, 2.0, 0.8]
    other = result("chain", 10.0)
    other.round_seconds = [1.0]  # a different number of rounds: nothing to pair
    compare_to_ar([ar, other], {("ar", "humaneval", 2): [[1]], ("chain", "humaneval", 2): [[1]]})
    assert other.speedup_by_round is None


def test_run_method_repeats_keep_the_fastest_run_and_the_first_outputs():
    import pytest
    import torch

    import specdec
    from conftest import make_model
    from specdec.harness import run_method

    target = make_model("llama")
    prompts = [[5, 6, 7, 8], [9, 10, 11]]
    with torch.no_grad():
        once, out1 = run_method(target, specdec.ARSupplier(), prompts, batch_size=2, max_new_tokens=6, pad_token_id=0,
                                eos_token_id=None, method="ar", prompt_set="x")
        thrice, out3 = run_method(target, specdec.ARSupplier(), prompts, batch_size=2, max_new_tokens=6,
                                  pad_token_id=0, eos_token_id=None, method="ar", prompt_set="x", repeats=3)
    assert out1 == out3 and thrice.repeats == 3 and thrice.new_tokens == once.new_tokens == 12
    assert len(thrice.round_seconds) == 3 and min(thrice.round_seconds) == pytest.approx(thrice.seconds, abs=1e-6)
    with pytest.raises(ValueError, match="repeats: expected an int >= 1"):
        run_method(target, specdec.ARSupplier(), prompts, batch_size=2, max_new_tokens=6, pad_token_id=0,
                   eos_token_id=None, method="ar", prompt_set="x", repeats=0)
