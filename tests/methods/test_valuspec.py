"""ValuSpec: the filter's keep rule on hand-worked trees, scores against plain per-branch forwards,
calibration, its file, and output identity with the filter on every tiny architecture."""

from __future__ import annotations

import json
import math
from dataclasses import replace

import numpy as np
import pytest
import torch

import specdec
from specdec import calibration as calibration_module
from specdec.calibration import Calibration, calibrate, threshold
from specdec.tree import TreeBatch
from specdec.valuspec import BranchScorer, FixedThresholdFilter, ValuSpecFilter, keep_branches
from specdec.verify import Acceptance
from tests.helpers import (MODERATE, VOCAB, FixedLogprobs, calibration, count_calls, eos_mid_batch_case, fixed_cost,
                           make_model, perturbed, plain_branch_scores, ragged_prompts, reference, state_for,
                           store_of_outputs)


# Row 0, the module docstring's tree with exact binary fractions: root r; a (-0.5), b (-3) under r; c (-1.5)
# under a. Branches r-a-c = -1.0, r-b = -3.0. Row 1: chain n1 (-2) - n2 (-0.5) - n3 (-0.5) and n4 (-0.25)
# under the root, one padding node. Branches r-n1-n2-n3 = -1.0, r-n4 = -0.25; n1 alone would score -2.
TOKENS = [[7, 3, 5, 9, 0], [7, 11, 12, 13, 14]]
PARENTS = [[-1, 0, 0, 1, -1], [-1, 0, 1, 2, 0]]
LOGP = torch.tensor([[0.0, -0.5, -3.0, -1.5, 0.0], [0.0, -2.0, -0.5, -0.5, -0.25]])


@pytest.mark.parametrize("tau, keep", [
    (-1.0, [[1, 1, 0, 1, 0], [1, 1, 1, 1, 1]]),  # ties are kept; n1 (-2) stays as an ancestor of a kept leaf
    (-0.5, [[1, 0, 0, 0, 0], [1, 0, 0, 0, 1]]),  # row 0: no branch left, the root alone
    (-3.0, [[1, 1, 1, 1, 0], [1, 1, 1, 1, 1]]),
    (0.0, [[1, 0, 0, 0, 0], [1, 0, 0, 0, 0]]),
])
def test_keep_rule_on_hand_worked_trees(tau, keep):
    tree = TreeBatch.from_parents(TOKENS, PARENTS, [4, 5])
    scores = specdec.ops.path_mean(LOGP, tree.parents, tree.num_nodes, backend="torch")
    assert scores[0, 3] == -1.0 and scores[1, 3] == -1.0 and scores[1, 4] == -0.25
    assert keep_branches(tree, scores, tau).tolist() == [[bool(x) for x in row] for row in keep]


@pytest.mark.parametrize("tau, keep", [
    (-0.5, [[1, 1, 0, 0, 0], [1, 0, 0, 0, 1]]),  # row 0: a (-0.5) qualifies although its branch (-1) does not
    (-1.5, [[1, 1, 0, 1, 0], [1, 1, 1, 1, 1]]),  # row 1: n2 (-1.25) and n3 keep n1 (-2) as their ancestor
    (-0.1, [[1, 0, 0, 0, 0], [1, 0, 0, 0, 0]]),
])
def test_prefix_unit_keeps_good_prefixes_of_bad_branches(tau, keep):
    tree = TreeBatch.from_parents(TOKENS, PARENTS, [4, 5])
    scores = specdec.ops.path_mean(LOGP, tree.parents, tree.num_nodes, backend="torch")
    assert keep_branches(tree, scores, tau, "prefix").tolist() == [[bool(x) for x in row] for row in keep]
    with pytest.raises(ValueError, match="unit: expected 'branch' or 'prefix'"):
        ValuSpecFilter(FixedLogprobs(LOGP), calibration(tau), unit="leaf")


def test_filter_compacts_counts_and_falls_back_to_the_root():
    target = make_model("llama")
    tree = TreeBatch.from_parents(TOKENS, PARENTS, [4, 5], logp=LOGP)
    filt = ValuSpecFilter(FixedLogprobs(LOGP), calibration(-0.5), unit="branch", fill=False)
    filt.attach(target, specdec.ARSupplier())
    state = state_for(*ragged_prompts([4, 6]))
    filt.start(state)
    out = filt.filter(tree, state)
    out.validate(VOCAB)
    assert out.num_nodes.tolist() == [1, 2] and out.size == 2  # cut to the widest row
    assert out.tokens[0, 0] == 7 and out.tokens[1].tolist() == [7, 14] and out.parents[1].tolist() == [-1, 0]
    assert out.logp[1].tolist() == [0.0, -0.25]
    s = filt.report().to_dict()
    assert (s["rows"], s["branches"], s["branches_kept"], s["nodes"], s["nodes_kept"]) == (2, 4, 1, 7, 1)
    assert s["filter_emptied"] == 1 and s["empty_tree_rate"] == 0.5 and s["ar_fallback_rate"] == 0.5
    # a second step with one row finished: only the active row is counted
    state.finished[:] = [True, False]
    filt.filter(tree, state)
    assert filt.report().rows == 3 and filt.report().branches == 6


def test_fixed_threshold_is_a_probability_cut_off():
    filt = FixedThresholdFilter(FixedLogprobs(LOGP), 0.5)
    assert filt.taus == (math.log(0.5),) and filt.unit == "branch"  # one tau for every length, the paper's rule
    for bad in (0.0, 1.5, True, "0.5"):
        with pytest.raises(ValueError, match="probability: expected a number in"):
            FixedThresholdFilter(FixedLogprobs(LOGP), bad)
    with pytest.raises(ValueError, match="calibration: expected a specdec Calibration"):
        ValuSpecFilter(FixedLogprobs(LOGP), -1.0)


@pytest.mark.hf
@pytest.mark.parametrize("arch", ["llama", "qwen3"])
def test_scores_equal_plain_per_branch_forwards(arch):
    """Two steps on a ragged batch (the second after a catch-up of accepted tokens): every branch's score
    equals the mean log-prob of its tokens in a plain forward of the scorer over its context."""
    scorer_model = make_model(arch, seed=4)
    ids, mask = ragged_prompts([5, 9], seed=2)
    state = state_for(ids, mask)
    scorer = BranchScorer(scorer_model, backend="torch")
    scorer.attach(make_model(arch))
    scorer.start(state, region=16)
    contexts = [ids[b][mask[b] == 1].tolist() for b in range(2)]
    trees = [TreeBatch.from_parents([[ids[0, -1], 10, 11, 12, 13, 0], [ids[1, -1], 20, 21, 22, 23, 24]],
                                    [[-1, 0, 0, 1, 3, -1], [-1, 0, 1, 1, 0, 4]], [5, 6]),
             None]
    for step in range(2):
        tree = trees[step]
        if tree is None:  # accepted: row 0 took 10 then bonus 40, row 1 took nothing, bonus 41
            acc = torch.tensor([[10, 40], [41, -1]])
            scorer.commit(Acceptance(acc, torch.tensor([1, 0]), torch.tensor([[0, 1], [0, -1]]), acc.numpy(),
                                     np.array([1, 0])))
            contexts = [contexts[0] + [10, 40], contexts[1] + [41]]
            tree = TreeBatch.from_parents([[40, 5, 6, 0], [41, 7, 8, 9]], [[-1, 0, 0, -1], [-1, 0, 1, 1]], [3, 4])
        scores = scorer.scores(tree)
        for b in range(2):
            for leaf, want in plain_branch_scores(scorer_model, contexts[b], tree, b).items():
                assert scores[b, leaf].item() == pytest.approx(want, abs=2e-5), (step, b, leaf)


@pytest.mark.hf
def test_draft_logp_reuse_equals_a_scorer_forward():
    target = make_model("qwen2")
    draft = perturbed(target)
    ids, mask = ragged_prompts([6, 9], seed=4)
    sup = specdec.DraftSupplier(draft, mode="tree", depth=3, topk=3, total_tokens=9)
    sup.attach(target)
    state = state_for(ids, mask)
    sup.start(state)
    tree = sup.propose(state)
    reuse, forward = BranchScorer(draft), BranchScorer(draft, reuse_draft_logp=False)
    for s in (reuse, forward):
        s.attach(target, sup)
        s.start(state, region=20)
    assert reuse.reusing and not forward.reusing
    assert torch.allclose(reuse.scores(tree), forward.scores(tree), atol=1e-4)
    assert not BranchScorer(target).reusing  # a scorer that is not the supplier's draft never reuses
    bare = replace(tree, logp=None)  # the same tree without the draft's log-probs
    with pytest.raises(ValueError, match="reuse_draft_logp=False"):  # its cache was never filled: no forward on it
        reuse.scores(bare)


def test_threshold_is_the_lower_delta_quantile():
    scores = np.random.default_rng(0).permutation(np.arange(100.0)) / -10
    tau = threshold(scores, 0.05)
    assert tau == -9.5  # sorted ascending -9.9 .. 0: the 5% quantile at index 4.95, taken "lower" (index 4)
    assert (scores >= tau).mean() == 0.96  # at least 1 - delta of the scores reach tau
    with pytest.raises(ValueError, match="scores: expected a non-empty"):
        threshold(np.array([]), 0.05)


@pytest.mark.hf
def test_calibrate_scores_windows_of_the_targets_greedy_output(tmp_path):
    """tau_d for d = 1..4 against windows of the target's greedy output, each scored as a branch of its own
    by a plain forward of the scorer."""
    target, scorer = make_model("llama"), make_model("llama", seed=3)
    prompts = [[5, 6, 7, 8], [9, 10, 11, 12, 13, 14]]
    cal = calibrate(target, scorer, prompts, max_new_tokens=10, window=3, max_length=4, delta=0.2)
    outputs = []
    for p in prompts:
        new = reference(target, torch.tensor([p]), torch.ones(1, len(p), dtype=torch.int64), 10, eos=[])[0, len(p):]
        outputs.append(new.tolist())
    for d in range(1, 5):
        want = []
        for p, new in zip(prompts, outputs):
            for t in range(len(new) - d + 1):  # every whole window, each scored as a branch of its own
                branch = TreeBatch.chain(torch.tensor([[p[-1]] + new[t:t + d]]), torch.tensor([d + 1]))
                want += plain_branch_scores(scorer, p + new[:t], branch, 0).values()
        assert cal.num_windows[d - 1] == len(want) == 2 * (10 - d + 1)
        assert cal.taus[d - 1] == pytest.approx(threshold(np.array(want), 0.2), abs=1e-5), d
    assert cal.num_prompts == 2 and cal.window == 3 and cal.tau == cal.taus[2] and len(cal.taus) == 4
    assert calibrate(target, scorer, prompts, max_new_tokens=10, window=3, max_length=4, delta=0.2,
                     outputs=outputs) == cal
    cal.save(tmp_path / "c.json")
    assert Calibration.load(tmp_path / "c.json") == cal
    with pytest.raises(ValueError, match="window: 20 tokens exceeds max_new_tokens 10"):
        calibrate(target, scorer, prompts, max_new_tokens=10, window=20)
    with pytest.raises(ValueError, match="max_length: 11 tokens exceeds max_new_tokens 10"):
        calibrate(target, scorer, prompts, max_new_tokens=10, window=3, max_length=11)
    with pytest.raises(ValueError, match="delta: expected a number in"):
        calibrate(target, scorer, prompts, delta=1.0)


@pytest.mark.parametrize("edit, match", [
    (lambda d: "not json {", "is not JSON"),
    (lambda d: {**d, "format": "x"}, "is not a specdec-valuspec-calibration file"),
    (lambda d: {**d, "version": 9}, "version 9, expected 1 or 2"),
    (lambda d: {k: v for k, v in d.items() if k != "taus"}, r"missing fields \['taus'\]"),
    (lambda d: {**d, "tau": -1.0}, r"unknown fields \['tau'\]"),
    (lambda d: {**d, "taus": [-2.0, 0.5]}, r"taus\[1\] \(tau_2\) must be a finite mean log-prob"),
    (lambda d: {**d, "taus": [-2.0, "low"]}, r"taus\[1\] \(tau_2\) must be a finite mean log-prob"),
    (lambda d: {**d, "taus": []}, "taus must be a non-empty list"),
    (lambda d: {**d, "taus": -2.0}, "taus must be a non-empty list"),
    (lambda d: {**d, "num_windows": [10]}, "num_windows has 1 entries, taus 2"),
    (lambda d: {**d, "num_windows": [10, 0]}, r"num_windows\[1\] must be an int >= 1"),
    (lambda d: {**d, "delta": 1.5}, r"delta must lie in \(0, 1\)"),
    (lambda d: {**d, "window": 2.5}, "window must be int"),
])
def test_corrupt_calibration_files_raise(tmp_path, edit, match):
    path = tmp_path / "c.json"
    calibration(-2.0, -1.5).save(path)
    data = edit(json.loads(path.read_text()))
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    with pytest.raises(ValueError, match=match):
        Calibration.load(path)
    with pytest.raises(ValueError, match="no file at"):
        Calibration.load(tmp_path / "missing.json")


# ------------------------------------------------------------------------------------ output identity
# Filter configurations: thresholds by length with either unit, and the paper's rule (whole branches, one tau).
CONFIGS = {"branch": dict(unit="branch"), "prefix": dict(unit="prefix"),
           "paper": dict(unit="branch", length_aware=False)}
CAL_PROMPTS = [[5, 6, 7, 8, 9], [20, 30, 40, 50]]
DELTA = 0.4  # high, so that the filter visibly cuts (at 0.05 these sharp tiny models keep nearly every branch)


@pytest.fixture(scope="module")
def tau(models):
    """Per architecture: thresholds by length (1..16) for the perturbed model scoring the target's output."""
    _, target, noisy = models
    return calibrate(target, noisy, CAL_PROMPTS, max_new_tokens=16, window=4, delta=DELTA)


def check_filtered(out, ref, arch):
    assert torch.equal(out.sequences, ref), arch
    f = out.stats.filter
    assert 0 < f.nodes_kept < f.nodes, f  # the filter cut something and kept something
    assert f.rows == len(out.stats.accepted_lengths) and f.accepted <= f.nodes_kept


@pytest.mark.hf
@pytest.mark.parametrize("config", sorted(CONFIGS))
@pytest.mark.parametrize("lengths", [[7], [5, 11, 8]], ids=["batch1", "ragged3"])
def test_identity_retrieval(tmp_path, models, tau, lengths, config):
    arch, target, noisy = models
    ids, mask = ragged_prompts(lengths)
    ref = reference(target, ids, mask, 24, eos=None)
    store = store_of_outputs(tmp_path, ids, mask, ref[:, ids.shape[1]:ids.shape[1] + 16])
    gen = specdec.SpeculativeGenerator(target, specdec.RetrievalSupplier(store, continuation=6, budget=12),
                                       filter=ValuSpecFilter(noisy, tau, **CONFIGS[config]))
    check_filtered(gen.generate(ids, attention_mask=mask, max_new_tokens=24, pad_token_id=0, eos_token_id=[]), ref, arch)


@pytest.mark.hf
@pytest.mark.parametrize("scorer, config", [("draft", "prefix"), ("target", "branch")])
@pytest.mark.parametrize("lengths", [[7], [5, 11, 8]], ids=["batch1", "ragged3"])
def test_identity_draft_tree(models, tau, lengths, scorer, config):
    """scorer "draft": the supplier's own log-probs are reused; "target": a second model's forward."""
    arch, target, noisy = models
    ids, mask = ragged_prompts(lengths)
    ref = reference(target, ids, mask, 24, eos=None)
    # the threshold rule alone: in a ragged batch, filling fixed-size trees back to the padded width often
    # returns every cut node (the fill's identity: tests/methods/test_valuspec_gate.py)
    filt = ValuSpecFilter(noisy if scorer == "draft" else target, tau, fill=False, **CONFIGS[config])
    gen = specdec.SpeculativeGenerator(target, specdec.DraftSupplier(noisy, mode="tree", depth=4, topk=3,
                                                                     total_tokens=10), filter=filt)
    check_filtered(gen.generate(ids, attention_mask=mask, max_new_tokens=24, pad_token_id=0, eos_token_id=[]), ref, arch)
    assert filt.scorer.reusing == (scorer == "draft")


@pytest.mark.hf
def test_identity_eos_mid_batch(tmp_path, models, tau):
    arch, target, noisy = models
    ids, mask, eos, ref, store = eos_mid_batch_case(tmp_path, target)
    for supplier, unit in ((specdec.RetrievalSupplier(store, continuation=5, budget=16), "branch"),
                           (specdec.RetrievalSupplier(store, continuation=5, budget=16), "prefix"),
                           (specdec.DraftSupplier(noisy, mode="tree", depth=4, topk=3, total_tokens=10), "prefix"),
                           (specdec.DraftSupplier(noisy, mode="tree", depth=4, topk=3, total_tokens=10), "branch")):
        gen = specdec.SpeculativeGenerator(target, supplier, filter=ValuSpecFilter(target, tau, unit=unit))
        out = gen.generate(ids, attention_mask=mask, max_new_tokens=20, eos_token_id=eos, pad_token_id=0)
        check_filtered(out, ref, arch)
        row0 = out.sequences[0, ids.shape[1]:].tolist()
        assert eos in row0 and all(t == 0 for t in row0[row0.index(eos) + 1:])


@pytest.mark.hf
@pytest.mark.filterwarnings("ignore:cost_model")  # a hand-made cost model, not a profile of this machine
@pytest.mark.parametrize("unit", ["branch", "prefix"])
@pytest.mark.parametrize("lengths", [[9], [5, 11, 8]], ids=["batch1", "ragged3"])  # 9: prompt lookup finds matches
@pytest.mark.parametrize("method", ["chain", "smart", "prompt_lookup"])
def test_identity_other_suppliers(method, lengths, unit):
    target = make_model("llama")
    noisy = perturbed(target)
    ids, mask = ragged_prompts(lengths)
    ref = reference(target, ids, mask, 24, eos=None)
    supplier = {"chain": lambda: specdec.DraftSupplier(noisy, mode="chain", depth=4),
                "smart": lambda: specdec.SmartSupplier(noisy, fixed_cost(**MODERATE, batch_size=len(lengths)), topk=3,
                                                       frontier=2, max_depth=4),
                "prompt_lookup": lambda: specdec.PromptLookupSupplier(max_ngram=3, num_pred=5, max_matches=3)}[method]()
    cal = calibrate(target, noisy, CAL_PROMPTS, max_new_tokens=16, window=4, delta=DELTA)
    gen = specdec.SpeculativeGenerator(target, supplier, filter=ValuSpecFilter(noisy, cal, unit=unit, fill=False))
    check_filtered(gen.generate(ids, attention_mask=mask, max_new_tokens=24, pad_token_id=0, eos_token_id=[]), ref,
                   method)


@pytest.mark.hf
def test_audit_counts_false_discards():
    """Self-drafting (draft = target): every branch the target accepts is a discard the audit must count
    when the cut-off keeps almost nothing, and none when it keeps everything."""
    target = make_model("mistral")
    ids, mask = ragged_prompts([5, 9])
    for probability, lost in ((0.999999, True), (1e-30, False)):
        filt = FixedThresholdFilter(target, probability, audit=True)
        gen = specdec.SpeculativeGenerator(target, specdec.DraftSupplier(target, mode="chain", depth=3), filter=filt)
        out = gen.generate(ids, attention_mask=mask, max_new_tokens=12, pad_token_id=0, eos_token_id=[])
        assert torch.equal(out.sequences, reference(target, ids, mask, 12, eos=None))
        f = out.stats.filter
        assert f.audited == f.rows == len(out.stats.accepted_lengths)
        # The self-draft chain is always accepted whole (3 tokens) by the unfiltered tree, and what the
        # filtered tree accepts is the kept prefix of that path: kept + lost = 3 on every row-step.
        assert sum(a - 1 for a in out.stats.accepted_lengths) + f.tokens_lost == 3 * f.rows
        assert f.rule_discards == f.false_discards  # no gate: the threshold rule made every cut
        if lost:
            assert f.false_discards > 0 and f.tokens_lost >= f.false_discards
        else:
            assert f.false_discards == 0 and f.tokens_lost == 0 and f.nodes_kept == f.nodes


# ------------------------------------------------------------------------------- the calibration cache


@pytest.mark.hf
def test_calibration_cache_is_keyed_by_content(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECDEC_CACHE", str(tmp_path))
    calls = count_calls(monkeypatch, calibration_module, "calibrate")
    target = make_model("llama")
    prompts = [ragged_prompts([6])[0][0].tolist()]
    for scorer in (make_model("llama", seed=5), make_model("llama", seed=6)):  # same config, other weights
        calibration_module.cached_calibration(target, scorer, prompts, max_new_tokens=6, window=3)
    assert len(calls) == 2
