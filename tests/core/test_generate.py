"""Output identity: every method equals target.generate(do_sample=False), token for token (fp32)."""

from __future__ import annotations

import pytest
import torch

import specdec
from tests.helpers import ARCHS, make_model, perturbed, ragged_prompts, reference

METHODS = ["ar", "chain", "tree", "prompt_lookup"]


def supplier_for(method: str, draft):
    if method == "ar":
        return specdec.ARSupplier()
    if method == "chain":
        return specdec.DraftSupplier(draft, mode="chain", depth=4)
    if method == "tree":
        return specdec.DraftSupplier(draft, mode="tree", depth=4, topk=3, total_tokens=10)
    return specdec.PromptLookupSupplier(max_ngram=3, num_pred=5, max_matches=3)


@pytest.mark.hf
@pytest.mark.parametrize("method, draft_kind", [("ar", "none"), ("prompt_lookup", "none"), ("chain", "self"),
                                                ("chain", "perturbed"), ("tree", "self"), ("tree", "perturbed")])
@pytest.mark.parametrize("lengths", [[7], [5, 11, 8]], ids=["batch1", "ragged3"])
def test_identity(models, method, draft_kind, lengths):
    arch, target, noisy = models
    ids, mask = ragged_prompts(lengths)
    ref = reference(target, ids, mask, 24, eos=None)
    gen = specdec.SpeculativeGenerator(target, supplier_for(method, target if draft_kind == "self" else noisy))
    out = gen.generate(ids, attention_mask=mask, max_new_tokens=24, pad_token_id=0, eos_token_id=[])
    assert torch.equal(out.sequences, ref), f"{arch}/{method}/{draft_kind}"
    assert out.stats.new_tokens == 24 * len(lengths)
    assert sum(out.stats.accepted_lengths) == out.stats.new_tokens  # a capped last step counts what it emitted
    if draft_kind == "self":
        assert out.stats.mean_accepted_length > 1.0  # the self-draft's candidates are accepted
    if method == "chain" and draft_kind == "self":
        assert out.stats.mean_accepted_length > 4.0  # everything accepted but the capped last step
    if draft_kind == "perturbed":  # partial acceptance: both the accept and the reject paths ran
        assert 1.0 < out.stats.mean_accepted_length < 5.0
        assert min(out.stats.accepted_lengths) == 1


@pytest.mark.hf
@pytest.mark.parametrize("method", METHODS)
def test_identity_eos_mid_batch(models, method):
    """One row reaches EOS early: it is padded afterwards; the others go on, as in generate()."""
    arch, target, noisy = models
    ids, mask = ragged_prompts([6, 10, 9], seed=3)
    free = reference(target, ids, mask, 20, eos=None)[:, ids.shape[1]:]
    eos = int(free[0, 4])  # row 0 emits it at step 5 (or earlier)
    ref = reference(target, ids, mask, 20, eos=eos)
    assert ref.shape[1] > ids.shape[1]
    gen = specdec.SpeculativeGenerator(target, supplier_for(method, noisy))
    out = gen.generate(ids, attention_mask=mask, max_new_tokens=20, eos_token_id=eos, pad_token_id=0)
    assert torch.equal(out.sequences, ref), f"{arch}/{method}"
    assert sum(out.stats.accepted_lengths) == out.stats.new_tokens  # nothing past EOS or the cap is counted
    row0 = out.sequences[0, ids.shape[1]:].tolist()
    assert eos in row0 and all(t == 0 for t in row0[row0.index(eos) + 1:])


@pytest.mark.hf
def test_stats_account_for_every_token():
    target = make_model("qwen2")
    ids, mask = ragged_prompts([8, 5])
    out = specdec.SpeculativeGenerator(target, specdec.DraftSupplier(target, mode="tree", depth=3, topk=2,
                                                                    total_tokens=8)).generate(
        ids, attention_mask=mask, max_new_tokens=12, eos_token_id=[], pad_token_id=0)
    s = out.stats
    assert s.new_tokens == 24
    assert len(s.accepted_lengths) == len(s.tree_sizes) >= s.steps
    assert sum(s.accepted_lengths) >= s.new_tokens  # the last step may emit more than the budget keeps
    assert sum(s.accepted_histogram.values()) == len(s.accepted_lengths)
    assert all(t == 8 for t in s.tree_sizes)
    assert s.tokens_per_second > 0 and s.seconds >= sum(s.stage_seconds.values()) * 0.99


@pytest.mark.hf
@pytest.mark.parametrize("arch", sorted(ARCHS))
@pytest.mark.parametrize("backend", ["torch", "sdpa"])
def test_identity_with_backend_forced(arch, backend):
    """The identity grid's two shapes (plain decoding, a draft tree) on a ragged batch, each backend forced."""
    target = make_model(arch)
    ids, mask = ragged_prompts([5, 11, 8])
    ref = target.generate(ids, attention_mask=mask, max_new_tokens=16, do_sample=False, pad_token_id=0)
    for supplier in (specdec.ARSupplier(),
                     specdec.DraftSupplier(perturbed(target), mode="tree", depth=4, topk=3, total_tokens=10,
                                           backend=backend)):
        gen = specdec.SpeculativeGenerator(target, supplier, backend=backend)
        out = gen.generate(ids, attention_mask=mask, max_new_tokens=16, pad_token_id=0)  # the model's EOS applies to both
        assert torch.equal(out.sequences, ref), f"{arch}/{backend}/{type(supplier).__name__}"
