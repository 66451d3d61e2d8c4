"""ValuSpec's thresholds by branch length, version-1 calibration files, calibration from text, the
paper's stats (acceptance of retained candidates, filter share) and the per-step scoring gate."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

import specdec
from specdec.calibration import Calibration, calibrate, thresholds_by_length
from specdec.generate import Stats
from specdec.tree import TreeBatch
from specdec.valuspec import BranchScorer, ScoringGate, StepPlan, ValuSpecFilter, keep_branches
from specdec.verify import Acceptance
from tests.helpers import (FixedLogprobs, calibration, counting, make_model, perturbed, plain_branch_scores,
                           ragged_prompts, reference, state_for, store_of_outputs)


# ------------------------------------------------------------------------------ thresholds by length
def brute_force_taus(trajectories: list[list[float]], delta: float) -> list[float]:
    """tau_d by enumeration: every window of d consecutive tokens, its mean, sorted; the "lower"
    delta-quantile is the element at index floor(delta * (n - 1))."""
    taus = []
    for d in range(1, max(map(len, trajectories)) + 1):
        scores = sorted(sum(lp[t:t + d]) / d for lp in trajectories for t in range(len(lp) - d + 1))
        taus.append(scores[math.floor(delta * (len(scores) - 1))])
    return taus


@pytest.mark.parametrize("delta", [0.05, 0.2, 0.5])
def test_tau_per_length_equals_the_brute_force_quantile(delta):
    rng = np.random.default_rng(7)
    trajectories = [rng.normal(-2, 1.5, n).round(3).tolist() for n in (12, 5, 1, 9)]
    taus, counts = thresholds_by_length([np.array(t) for t in trajectories], 20, delta)
    assert len(taus) == 12  # lengths past the longest trajectory have no window: left out
    assert counts == [sum(max(0, len(t) - d + 1) for t in trajectories) for d in range(1, 13)]
    assert taus == pytest.approx(brute_force_taus(trajectories, delta), abs=1e-12)
    assert len(set(np.round(taus, 9))) > 6  # the lengths do get thresholds of their own


def test_tau_per_length_docstring_example():
    taus, counts = thresholds_by_length([np.array([-1.0, -3.0, -2.0])], 5, 0.5)
    assert taus == [-2.0, -2.5, -2.0] and counts == [3, 2, 1]


# Row 0: three branches under the root, of 1, 2 and 3 tokens: a (depth 1); b-c (c at depth 2); d-e-f.
# Row 1: a chain g-h-i-j of 4 tokens (beyond the 3 calibrated lengths: judged by tau_3).
TOKENS = [[7, 3, 4, 5, 6, 8, 9], [7, 10, 11, 12, 13, 0, 0]]
PARENTS = [[-1, 0, 0, 2, 0, 4, 5], [-1, 0, 1, 2, 3, -1, -1]]
TAUS = (-3.0, -2.0, -1.0)  # tau_1, tau_2, tau_3
# path scores (the mean log-prob at each node), chosen directly
SCORES = torch.tensor([[0.0, -2.5, -1.2, -1.5, -0.9, -1.4, -1.6],
                       [0.0, -0.5, -0.9, -1.2, -0.95, 0.0, 0.0]])


def test_a_branch_of_d_tokens_is_judged_by_tau_d():
    tree = TreeBatch.from_parents(TOKENS, PARENTS, [7, 5])
    keep = keep_branches(tree, SCORES, torch.tensor(TAUS), "branch")
    # a: -2.5 >= tau_1 kept; b-c: -1.5 >= tau_2 kept; d-e-f: -1.6 < tau_3 cut; g-h-i-j: -0.95 >= tau_3 kept
    assert keep.tolist() == [[True, True, True, True, False, False, False], [True] * 5 + [False] * 2]
    # No single tau does this: keeping a (-2.5) keeps d-e-f (-1.6) too; cutting d-e-f cuts a.
    for tau in sorted({float(x) for x in SCORES.flatten()} | set(TAUS)):
        assert keep_branches(tree, SCORES, tau, "branch").tolist() != keep.tolist(), tau


def test_a_prefix_of_d_tokens_is_judged_by_tau_d():
    tree = TreeBatch.from_parents(TOKENS, PARENTS, [7, 5])
    keep = keep_branches(tree, SCORES, torch.tensor(TAUS), "prefix")
    # d (-0.9 >= tau_1) and d-e (-1.4 >= tau_2) qualify, d-e-f (-1.6 < tau_3) does not: f alone is cut
    assert keep.tolist() == [[True] * 6 + [False], [True] * 5 + [False] * 2]
    for tau in sorted({float(x) for x in SCORES.flatten()} | set(TAUS)):
        assert keep_branches(tree, SCORES, tau, "prefix").tolist() != keep.tolist(), tau


def test_the_filter_uses_the_calibrated_taus_or_the_papers_single_tau():
    """ValuSpecFilter reads tau_d from the calibration; length_aware=False judges every branch by
    `Calibration.tau` (tau at its window length, here 2)."""
    tree = TreeBatch.from_parents(TOKENS, PARENTS, [7, 5])
    parents = tree.parents.clamp(min=0)
    depth = tree.depth.clamp(min=1).to(torch.float32)
    # node log-probs whose path means are SCORES: logp[i] = d_i * s_i - (d_i - 1) * s_parent
    logp = torch.where(tree.parents >= 0, depth * SCORES - (depth - 1) * SCORES.gather(1, parents), 0.0)
    cal = calibration(*TAUS, window=2)
    state = state_for(*ragged_prompts([4, 6]))
    kept = {}
    for length_aware in (True, False):
        filt = ValuSpecFilter(FixedLogprobs(logp), cal, unit="branch", length_aware=length_aware,
                              fill=False)
        filt.attach(make_model("llama"), specdec.ARSupplier())
        filt.start(state)
        out = filt.filter(tree, state)
        kept[length_aware] = [out.tokens[b, :n].tolist() for b, n in enumerate(out.num_nodes.tolist())]
    assert kept[True] == [[7, 3, 4, 5], [7, 10, 11, 12, 13]]  # a and b-c kept, d-e-f cut; row 1 whole
    assert kept[False] == [[7, 4, 5, 6, 8, 9], [7, 10, 11, 12, 13]]  # tau_2 = -2 alone: a cut, d-e-f kept
    filt = ValuSpecFilter(FixedLogprobs(logp), cal, unit="branch", length_aware=False)
    assert filt.taus == (cal.tau,) == (-2.0,)
    with pytest.raises(ValueError, match="length_aware: expected a bool"):
        ValuSpecFilter(FixedLogprobs(logp), cal, length_aware="yes")


def test_calibration_tau_at_clamps_to_the_longest_length():
    cal = calibration(-3.0, -2.5, -2.25, window=2)
    assert [cal.tau_at(d) for d in (1, 2, 3, 4, 30)] == [-3.0, -2.5, -2.25, -2.25, -2.25]
    assert cal.tau == -2.5 and cal.length_aware and not calibration(-1.0).length_aware


# ----------------------------------------------------------------------------------- version-1 files
V1 = {"format": "specdec-valuspec-calibration", "version": 1, "tau": -2.69, "delta": 0.05, "window": 10,
      "target": "demo-target", "scorer": "demo-draft", "num_prompts": 28, "num_windows": 1500, "max_new_tokens": 64}


def test_version_1_files_load_as_one_tau_for_every_length(tmp_path):
    path = tmp_path / "v1.json"
    path.write_text(json.dumps(V1))
    with pytest.warns(UserWarning, match="version 1, one tau .* for every branch length"):
        cal = Calibration.load(path)
    assert cal.taus == (-2.69,) and cal.num_windows == (1500,) and cal.window == 10 and cal.tau == -2.69
    assert all(cal.tau_at(d) == -2.69 for d in (1, 4, 10, 12, 40))
    filt = ValuSpecFilter(FixedLogprobs(torch.zeros(1, 1)), cal)  # length-aware by default: one tau anyway
    assert filt.taus == (-2.69,)
    cal.save(tmp_path / "v2.json")  # saved again, it is a version-2 file
    assert json.loads((tmp_path / "v2.json").read_text())["version"] == 2
    assert Calibration.load(tmp_path / "v2.json") == cal


@pytest.mark.parametrize("edit, match", [
    (lambda d: {k: v for k, v in d.items() if k != "tau"}, r"missing fields \['tau'\]"),
    (lambda d: {**d, "taus": [-1.0]}, r"unknown fields \['taus'\]"),
    (lambda d: {**d, "tau": 0.5}, r"taus\[0\] \(tau_1\) must be a finite mean log-prob"),
    (lambda d: {**d, "num_windows": 0}, r"num_windows\[0\] must be an int >= 1"),
])
def test_broken_version_1_files_raise(tmp_path, edit, match):
    path = tmp_path / "v1.json"
    path.write_text(json.dumps(edit(V1)))
    with pytest.raises(ValueError, match=match):
        Calibration.load(path)


# -------------------------------------------------------------------------------- calibration from text
@pytest.mark.hf
def test_calibrate_takes_strings_with_a_tokenizer(saved):
    root, target, tokenizer = saved
    scorer = perturbed(target)
    texts = ["w5 w6 w7 w5 w6", "w9 w10 w11 w12 w13 w9"]
    ids = [tokenizer(t).input_ids for t in texts]
    settings = dict(max_new_tokens=8, window=3, delta=0.3)
    from_text = calibrate(target, scorer, texts, tokenizer=tokenizer, **settings)
    assert from_text == calibrate(target, scorer, ids, eos_token_id=tokenizer.eos_token_id, **settings)
    assert calibrate(target, scorer, [torch.tensor(i) for i in ids], tokenizer=tokenizer, **settings) == from_text
    with pytest.raises(TypeError, match="tokenizer: prompt 1 is a string"):
        calibrate(target, scorer, [ids[0], texts[1]], **settings)
    with pytest.raises(TypeError, match="prompts: prompt 0 is a float"):
        calibrate(target, scorer, [1.5], **settings)
    with pytest.raises(TypeError, match="tokenizer: expected a Hugging Face tokenizer"):
        calibrate(target, scorer, texts, tokenizer="w5", **settings)


# ------------------------------------------------------------------------------------ the paper's stats
def test_acceptance_of_retained_candidates_and_the_filter_share():
    tree = TreeBatch.from_parents(TOKENS, PARENTS, [7, 5])
    filt = ValuSpecFilter(FixedLogprobs(torch.zeros(2, 7)), calibration(-1.0))  # every path scores 0: all kept
    filt.attach(make_model("llama"), specdec.ARSupplier())
    state = state_for(*ragged_prompts([4, 6]))
    filt.start(state)
    filt.filter(tree, state)
    acc = torch.tensor([[4, 9, -1, -1], [10, 11, 12, 20]])  # row 0: 1 candidate + bonus; row 1: 3 + bonus
    num = torch.tensor([1, 3])
    filt.commit(Acceptance(acc, num, torch.zeros_like(acc), acc.numpy(), num.numpy()))
    f = filt.report()
    assert (f.nodes_kept, f.accepted) == (10, 4) and f.to_dict()["acceptance_rate"] == 0.4
    stats = Stats(stage_seconds={"prefill": 5.0, "propose": 1.0, "filter": 1.0, "verify": 2.0, "commit": 0.0},
                  seconds=9.0, filter=f)
    assert stats.filter_share == 0.25  # of the steps' time, prefill excluded
    assert stats.to_dict()["filter"]["filter_share"] == 0.25


# ------------------------------------------------------------------------------------------ the gate
class ScheduledGate(ScoringGate):
    """Scores the steps whose number (from 1) is in `scored`; counts its calls."""

    def __init__(self, scored):
        self.scored, self.calls = scored, 0

    def plan(self, tree, state) -> StepPlan:
        self.calls += 1
        return StepPlan(score=self.scored(self.calls))


def retrieval_case(tmp_path, lengths: list[int]):
    """A tiny Qwen2 target, a perturbed copy as scorer, ragged prompts, their 24-token greedy reference, a
    datastore of their continuations and a calibration: (target, scorer, ids, mask, ref, store, cal)."""
    target = make_model("qwen2")
    noisy = perturbed(target)
    ids, mask = ragged_prompts(lengths)
    ref = reference(target, ids, mask, 24, eos=None)
    store = store_of_outputs(tmp_path, ids, mask, ref[:, ids.shape[1]:ids.shape[1] + 16])
    cal = calibrate(target, noisy, [[5, 6, 7, 8, 9], [20, 30, 40, 50]], max_new_tokens=16, window=4, delta=0.4)
    return target, noisy, ids, mask, ref, store, cal


@pytest.mark.hf
@pytest.mark.parametrize("fold", [2, 64], ids=["fold2", "fold64"])
@pytest.mark.parametrize("lengths", [[7], [5, 11, 8]], ids=["batch1", "ragged3"])
def test_unscored_steps_are_counted_like_scored_ones(tmp_path, monkeypatch, lengths, fold):
    """Unscored trees are counted in folds of up to FOLD steps (copied, then reduced together); an audited
    run counts every step at once. Same trees, same counts: rows, trees the supplier left empty, branches,
    nodes, kept ones, accepted tokens; with every other step scored too."""
    monkeypatch.setattr(specdec.valuspec, "FOLD", fold)
    target, noisy, ids, mask, ref, store, cal = retrieval_case(tmp_path, lengths)
    fields = ("rows", "supplier_empty", "filter_emptied", "branches", "branches_kept", "nodes", "nodes_kept",
              "accepted", "unscored", "steps", "steps_unscored", "width_proposed", "width_verified")
    for rule in (lambda n: False, lambda n: n % 2 == 0):
        counts = []
        for audit in (False, True):
            gen = specdec.SpeculativeGenerator(
                target, specdec.RetrievalSupplier(store, continuation=6, budget=12),
                filter=ValuSpecFilter(BranchScorer(noisy), cal, unit="branch", gate=ScheduledGate(rule), audit=audit))
            out = gen.generate(ids, attention_mask=mask, max_new_tokens=24, pad_token_id=0, eos_token_id=[])
            assert torch.equal(out.sequences, ref)
            counts.append({k: getattr(out.stats.filter, k) for k in fields})
        assert counts[0] == counts[1]
        assert counts[0]["steps_unscored"] >= 2  # with FOLD = 2 a fold runs inside the loop, not only at the report
        assert counts[0]["branches"] > 0 and counts[0]["rows"] >= counts[0]["steps"]


@pytest.mark.hf
@pytest.mark.parametrize("lengths", [[7], [5, 11, 8]], ids=["batch1", "ragged3"])
def test_gate_decides_which_steps_are_scored(tmp_path, lengths):
    """A gate that never scores: no scorer forward, trees verified whole; always: every step scored,
    exactly as without a gate; every other step: the scorer catches up on skipped steps. Output is
    identical to greedy decoding in every case."""
    target, noisy, ids, mask, ref, store, cal = retrieval_case(tmp_path, lengths)
    stats, forwards, asked = {}, {}, {}
    for name, rule in (("always", lambda n: True), ("none", None), ("never", lambda n: False),
                       ("alternate", lambda n: n % 2 == 0)):
        gate = ScheduledGate(rule) if rule is not None else None
        scorer = BranchScorer(noisy)
        calls = counting(scorer)
        gen = specdec.SpeculativeGenerator(target, specdec.RetrievalSupplier(store, continuation=6, budget=12),
                                           filter=ValuSpecFilter(scorer, cal, unit="branch", gate=gate))
        out = gen.generate(ids, attention_mask=mask, max_new_tokens=24, pad_token_id=0, eos_token_id=[])
        assert torch.equal(out.sequences, ref), name
        stats[name], forwards[name] = out.stats.filter, calls[0]
        if gate is not None:
            asked[name] = gate.calls
    # the gate is asked about every step with candidates (root-only trees are never scored nor asked about)
    n = asked["always"]
    assert 0 < n <= stats["always"].steps
    assert forwards == {"always": n, "none": n, "never": 0, "alternate": asked["alternate"] // 2}
    never = stats["never"]
    assert never.steps_unscored == asked["never"] > 0 and never.nodes_kept == never.nodes
    assert stats["always"] == stats["none"] and stats["none"].unscored == 0
    assert stats["none"].nodes_kept < stats["none"].nodes  # the scored runs did cut
    assert 0 < stats["alternate"].unscored < stats["alternate"].rows


@pytest.mark.hf
def test_scores_after_skipped_steps_equal_plain_forwards():
    """Two unscored steps, then a scored one: the scorer forwards every token accepted meanwhile first,
    and each branch's score equals a plain forward of the scorer over its whole context."""
    scorer_model = make_model("llama", seed=4)
    ids, mask = ragged_prompts([5, 9], seed=2)
    state = state_for(ids, mask)
    scorer = BranchScorer(scorer_model, backend="torch")
    scorer.attach(make_model("llama"))
    scorer.start(state, region=16)
    contexts = [ids[b][mask[b] == 1].tolist() for b in range(2)]
    # step 1 (unscored): row 0 accepts 2 tokens + bonus, row 1 only its bonus; step 2: row 0 bonus, row 1 one + bonus
    for acc, num in (([[11, 12, 13], [14, -1, -1]], [2, 0]), ([[15, -1], [16, 17]], [0, 1])):
        acc, num = torch.tensor(acc), torch.tensor(num)
        scorer.commit(Acceptance(acc, num, torch.zeros_like(acc), acc.numpy(), num.numpy()))
        contexts = [c + [t for t in row.tolist()[: n + 1]] for c, row, n in zip(contexts, acc, num.tolist())]
    tree = TreeBatch.from_parents([[15, 5, 6, 7, 0], [17, 8, 9, 10, 20]], [[-1, 0, 1, 0, -1], [-1, 0, 0, 2, 3]],
                                  [4, 5])
    scores = scorer.scores(tree)
    for b in range(2):
        for leaf, want in plain_branch_scores(scorer_model, contexts[b], tree, b).items():
            assert scores[b, leaf].item() == pytest.approx(want, abs=2e-5), (b, leaf)
    with pytest.raises(ValueError, match="gate: expected a specdec ScoringGate"):
        ValuSpecFilter(scorer, calibration(-1.0), gate=lambda tree, state: StepPlan())
