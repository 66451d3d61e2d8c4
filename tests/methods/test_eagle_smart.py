"""SMART over an EAGLE head (EAGLE-3 + SMART): output identity with generate_with(do_sample=False) across
plain stretches (the head's backlog of committed pairs and their target features), batch 1, ragged and
EOS mid-batch, both layouts; when drafting never pays the head never runs; a profile taken with the head;
argument checks."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

import specdec
from specdec.profiling import BACKLOGS
from tests.eagle_helpers import eagle_target, head_tensors, write_head
from tests.helpers import (MODERATE, SCHEDULE, fixed_cost, generate_with, make_model, perturbed, plan_schedule,
                           ragged_prompts, reference)


def random_head(tmp_path, target, kind="eagle3"):
    return specdec.EagleHead.from_pretrained(write_head(tmp_path / kind, *head_tensors(target, kind)), target)


@pytest.mark.hf
@pytest.mark.parametrize("arch, kind, case", [("llama", "eagle3", "batch1"), ("qwen3", "eagle3", "ragged3"),
                                              ("qwen2", "eagle1", "eos")])
def test_identity_across_plain_stretches(tmp_path, arch, kind, case):
    """Forced depth caps (drafting steps between plain stretches of 1-6 steps): the head catches up on
    every pair it missed, with its features, and the output is the target's greedy output."""
    target = eagle_target(arch)
    head = random_head(tmp_path, target, kind)
    ids, mask = ragged_prompts([7] if case == "batch1" else [6, 10, 9], seed=3)
    eos = []
    if case == "eos":
        eos = [int(reference(target, ids, mask, 24, eos=None)[0, ids.shape[1] + 6])]
    ref = reference(target, ids, mask, 24, eos=eos[0] if eos else [])
    # the default selection (llama), the pool drafted at once (qwen3), the device rule (qwen2)
    sup = specdec.SmartSupplier(head, fixed_cost(**MODERATE, batch_size=ids.shape[0]), topk=2, frontier=2,
                                max_depth=5, early_stop=arch == "llama",
                                selection="layered" if arch == "qwen2" else "global", online=False)
    backlogs = plan_schedule(sup, [0] + SCHEDULE)  # step 1 is root-only anyway: no features yet
    out = generate_with(target, sup, ids, mask, 24, eos)
    assert torch.equal(out.sequences, ref), f"{arch} {kind} {case}"
    assert max(backlogs) >= 7  # plain steps of one token each, then the root: caught up in one forward
    assert out.stats.plan.steps_drafted >= 3 and out.stats.mean_tree_size > 1.5


@pytest.mark.hf
def test_when_drafting_never_pays_the_head_never_runs(tmp_path):
    target = eagle_target("llama")
    head = random_head(tmp_path, target)
    calls = [0]
    head.register_forward_hook(lambda *_: calls.__setitem__(0, calls[0] + 1))
    ids, mask = ragged_prompts([5, 9])
    cost = fixed_cost(**MODERATE, batch_size=2, layer=1.0, catch_up=1.0)
    out = generate_with(target, specdec.SmartSupplier(head, cost, topk=2, frontier=2, max_depth=4), ids, mask, 12)
    assert torch.equal(out.sequences, reference(target, ids, mask, 12, eos=[]))
    assert calls[0] == 0 and out.stats.plan.steps_drafted == 0 and out.stats.mean_tree_size == 1.0


@pytest.mark.hf
def test_memory_estimate_counts_the_features_of_a_plain_call(tmp_path):
    """While SMART decodes plainly the head queues every step's target features for its next catch-up, up to
    a whole call's: the memory estimate's slope per cache slot holds a pair's K/V and its features, and a call
    decoded plainly throughout holds no more features than the estimate counts."""
    target = eagle_target("llama")
    head = random_head(tmp_path, target)
    c, size = head.config, head.fc.weight.element_size()
    per_pair = len(c.aux_layers) * c.target_hidden_size * size
    sup = specdec.SmartSupplier(head, fixed_cost(**MODERATE, batch_size=2, layer=1.0, catch_up=1.0), topk=2,
                                frontier=2, max_depth=4)
    small, large = sup.memory_bytes(2, 64), sup.memory_bytes(2, 128)
    assert large["max_depth"] - small["max_depth"] == 2 * 64 * (2 * c.num_kv_heads * c.head_dim * size + per_pair)
    held = []
    commit = sup.runner.commit
    sup.runner.commit = lambda acc: (commit(acc), held.append(sum(f.nbytes for _, f, _, _ in sup.runner._chunks)))
    ids, mask = ragged_prompts([5, 9])
    out = generate_with(target, sup, ids, mask, 12)
    assert out.stats.plan.steps_drafted == 0 and torch.equal(out.sequences, reference(target, ids, mask, 12, eos=[]))
    capacity = ids.shape[1] + 2 * (12 + sup.max_tree_size())  # as SpeculativeGenerator sizes it
    assert 0 < held[-1] == max(held) <= 2 * capacity * per_pair


@pytest.mark.hf
def test_profile_with_a_head(tmp_path):
    """The drafter's parts of the profile are the head's own forwards; SMART accepts the result."""
    target = eagle_target("qwen2")
    head = random_head(tmp_path, target)
    prof = specdec.profile(target, head, batch_sizes=(1, 2), context_len=24, sizes=(1, 3, 8), repeats=2,
                           progress=False)
    for table, width in ((prof.draft_seconds, 3), (prof.catch_up_seconds, len(BACKLOGS))):
        assert len(table) == 2 and all(len(row) == width and all(t > 0 for t in row) for row in table)
    ids, mask = ragged_prompts([6, 8])
    out = generate_with(target, specdec.SmartSupplier(head, prof, topk=2, frontier=2, max_depth=3), ids, mask, 10)
    assert torch.equal(out.sequences, reference(target, ids, mask, 10, eos=[]))


@pytest.mark.hf
def test_argument_errors(tmp_path):
    target = eagle_target("llama")
    head = random_head(tmp_path, target)
    with pytest.raises(ValueError, match="topk: 500 exceeds the draft's vocabulary"):
        specdec.SmartSupplier(head, fixed_cost(**MODERATE), topk=500)
    other = eagle_target("llama", seed=1)
    with pytest.raises(ValueError, match="head: built for another target"):
        specdec.SpeculativeGenerator(other, specdec.SmartSupplier(head, fixed_cost(**MODERATE)))


@pytest.mark.hf
@pytest.mark.parametrize("drafter", ["head", "draft"])
def test_the_planner_knows_when_a_probe_would_read_the_whole_prompt(tmp_path, drafter):
    """Until the drafter first runs in a call, its catch-up reads the call's whole prompt (a head's prompt
    pairs, a draft's prefill): the planner is told `cold` (such probes wait longest) until then, in every call."""
    if drafter == "head":
        target = eagle_target("llama")
        model = random_head(tmp_path, target)
    else:
        target = make_model("llama")
        model = perturbed(target)
    ids, mask = ragged_prompts([6, 9], seed=1)
    sup = specdec.SmartSupplier(model, fixed_cost(**MODERATE, batch_size=2), topk=2, frontier=2, max_depth=3,
                                online=False)
    planner, real, seen = sup.planner, sup.planner.plan, []

    def plan(backlog=1, context=None, cold=False):
        seen.append(cold)
        planner._plan = replace(real(backlog, context, cold), depth=next(schedule))
        return planner._plan

    planner.plan = plan
    for _ in range(2):
        schedule = iter([0, 0, 2, 0, 2, 0, 0, 0])
        generate_with(target, sup, ids, mask, 8, [])
        assert seen[:3] == [True, True, True] and not any(seen[3:]), seen
        seen.clear()


@pytest.mark.hf
def test_defaults_follow_the_drafter(tmp_path):
    """Over an EAGLE head SMART drafts its cap of layers on the device and ranks the pool once, with a cap of
    6; over a draft model it stops layer by layer, with a cap of 12; either is overridable."""
    target = eagle_target("llama")
    head = random_head(tmp_path, target)
    cost = fixed_cost(**MODERATE)
    over_head = specdec.SmartSupplier(head, cost)
    assert (over_head.early_stop, over_head.max_depth, over_head.selection) == (False, 6, "global")
    over_draft = specdec.SmartSupplier(perturbed(target), cost)
    assert (over_draft.early_stop, over_draft.max_depth, over_draft.selection) == (True, 12, "global")
    chosen = specdec.SmartSupplier(head, cost, early_stop=True, max_depth=9, selection="layered")
    assert (chosen.early_stop, chosen.max_depth, chosen.selection) == (True, 9, "layered")
