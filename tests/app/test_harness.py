"""The harness's comparison with AR: speedup, identity, and where a row first differs."""

from __future__ import annotations

import numpy as np
import pytest

from specdec.app.harness import MethodResult, compare_to_ar, encode, first_difference, fit


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


def test_paired_speedup_is_the_median_of_same_slot_ratios():
    """Each (round, batch) slot pairs the run with AR on the same batch back to back; the median ignores a
    slot a stall hit, where best-of would compare each method's luckiest slot."""
    from specdec.app.harness import paired_speedup

    ar, tree = result("ar", 10.0), result("tree", 10.0)
    ar.batch_tokens, tree.batch_tokens = [8, 4], [8, 4]
    ar.batch_seconds = [[1.0, 1.0], [1.0, 0.5], [2.0, 1.0]]  # round 3: the machine ran at half speed for both
    tree.batch_seconds = [[0.5, 4.0], [0.8, 0.4], [1.0, 0.5]]  # round 1 batch 2: a stall hit the tree only
    # ratios: 2.0, 0.25 | 1.25, 1.25 | 2.0, 2.0: median 1.625; a sum of per-batch minimums would give 1.5/0.9
    assert paired_speedup(tree, ar) == 1.625
    tree.batch_tokens = [8, 2]  # a run that emits fewer tokens on a batch (sampling) is paired by tokens/s
    assert paired_speedup(tree, ar) == pytest.approx(float(np.median([2.0, 0.125, 1.25, 0.625, 2.0, 1.0])))
    tree.batch_seconds = tree.batch_seconds[:2]  # rounds that do not match: nothing to pair
    assert paired_speedup(tree, ar) is None
    compare_to_ar([ar, tree], {("ar", "humaneval", 2): [[1]], ("tree", "humaneval", 2): [[1]]})
    assert tree.speedup_paired is None and ar.speedup_paired == 1.0


def test_interleaved_runs_rotate_their_order_and_keep_every_slot(monkeypatch):
    """Each (round, batch) slot starts one run later, so no run always follows the same one."""
    import torch

    import specdec
    from tests.helpers import make_model
    from specdec.app import harness
    from specdec.planner import PlanStats

    target = make_model("llama")
    order = []
    real = harness.SpeculativeGenerator.generate

    def logged(self, *args, **kwargs):
        order.append(self.supplier.tag)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(harness.SpeculativeGenerator, "generate", logged)
    class Planned(specdec.ARSupplier):  # reports a plan: its n-th call "drafted" n steps
        calls = 0

        def start(self, state):
            super().start(state)
            self.calls += 1

        def report(self):
            return PlanStats(steps_drafted=self.calls)

    runs = []
    for tag in "abc":
        supplier = Planned() if tag == "c" else specdec.ARSupplier()
        supplier.tag = tag
        runs.append(harness.Run(tag, supplier))
    prompts = [[5, 6, 7], [8, 9], [10, 11, 12]]
    with torch.no_grad():
        results = harness.run_interleaved(target, runs, prompts, batch_size=2, max_new_tokens=3, pad_token_id=0,
                                          eos_token_id=None, prompt_set="x", repeats=2)
    assert "".join(order) == "abc" "bca" "cab" "abc"  # 2 rounds x 2 batches
    for result, outputs in results:
        assert len(result.batch_seconds) == 2 and all(len(r) == 2 and min(r) > 0 for r in result.batch_seconds)
        assert result.batch_tokens == [6, 3] and len(outputs) == 3
        assert sum(result.batch_seconds[0]) == pytest.approx(result.round_seconds[0], abs=1e-5)
        # every call's drafting steps, where the best round's stats keep only that round's
        assert result.batch_drafted == ([[1, 2], [3, 4]] if result.method == "c" else None)


def test_run_method_repeats_keep_the_fastest_run_and_the_first_outputs():
    import pytest
    import torch

    import specdec
    from tests.helpers import make_model
    from specdec.app.harness import run_method

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


def test_a_prompt_too_long_for_the_model_is_left_out_quietly():
    """`encode` then `fit`: a prompt past the model's positions is left out (not cut), without transformers'
    "Token indices sequence length is longer than ..." warning (the results count it instead)."""
    import logging
    from types import SimpleNamespace

    from specdec.app.models import load_tokenizer

    tokenizer = load_tokenizer("demo-target")
    tokenizer.deprecation_warnings.pop("sequence-length-is-longer-than-the-specified-maximum", None)  # once only
    records = []
    handler = logging.Handler()
    handler.emit = records.append
    library = logging.getLogger("transformers")  # the tokenizer's logger propagates to the library's
    library.addHandler(handler)
    try:
        long = " ".join(["def f(x): return x"] * (tokenizer.model_max_length // 4))
        ids = encode(tokenizer, ["def f(x):", long], chat=False)
    finally:
        library.removeHandler(handler)
    assert len(ids[1]) > tokenizer.model_max_length
    config = SimpleNamespace(max_position_embeddings=tokenizer.model_max_length)
    model = SimpleNamespace(config=SimpleNamespace(get_text_config=lambda: config))
    assert fit(ids, model, 64) == [ids[0]]
    assert not [r for r in records if "sequence length is longer" in r.getMessage()]


def test_a_method_given_too_little_names_the_parameter_and_the_cli_its_flag():
    """Each registered method checks what it needs in order; the error names `make_supplier`'s parameter
    (library style), and the CLI's one table turns it into the flag the user sees."""
    from specdec.app.cli import PARAMETER_FLAGS
    from specdec.app.cli_checks import flag_message
    from specdec.app.harness import make_supplier
    from specdec.app.methods import METHODS, REGISTRY

    assert METHODS == tuple(REGISTRY) and METHODS[0] == "ar"
    cases = {"chain": ({}, "draft: method 'chain' needs a draft model", "--draft"),
             "smart": ({"draft": object()}, "cost: method 'smart' needs a cost profile of this pair", "--profile"),
             "retrieval-smart": ({}, "datastore: method 'retrieval-smart' needs a datastore", "--datastore"),
             "eagle-smart": ({}, "eagle: method 'eagle-smart' needs an EAGLE head", "--eagle")}
    for method, (given, message, flag) in cases.items():
        with pytest.raises(ValueError, match=message) as err:
            make_supplier(method, given.get("draft"))
        assert flag_message(str(err.value), PARAMETER_FLAGS).startswith(f"{flag}: method {method!r} needs ")
    with pytest.raises(ValueError, match="method: 'nope' is not one of"):
        make_supplier("nope", None)
