"""Nothing unbounded, API misuse refused precisely; pairs with padded vocabularies.

Tree sizes are bounded by the models' positions and by free memory; API misuse is a precise ValueError or
TypeError; drafts and scorers with more or fewer embedding rows than the target keep the output identical.
(Datastores' robustness: tests/methods/test_datastore.py; the command line's one-line errors:
tests/app/test_cli_checks.py; caches keyed by content: tests/methods/test_cost.py and test_valuspec.py.)
"""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

import specdec
from specdec.datastore import Datastore
from specdec.sampling import Sampling
from specdec.state import DecodeState
from tests.helpers import MODERATE, VOCAB, fixed_cost, make_model, perturbed, ragged_prompts, reference

pytestmark = pytest.mark.hf


# ---------------------------------------------------------------------------------------------- bounds
@pytest.fixture(scope="module")
def pair():
    target = make_model("llama")  # 256 positions
    return target, perturbed(target)


@pytest.mark.parametrize("make, match", [
    (lambda d: specdec.DraftSupplier(d, mode="chain", depth=300),
     r"depth: 300 exceeds the depth the models' 256 positions allow \(255\)"),
    (lambda d: specdec.DraftSupplier(d, mode="tree", depth=4, topk=3, total_tokens=100_000),
     r"total_tokens: 100000 exceeds the models' positions \(256\)"),
    (lambda d: specdec.SmartSupplier(d, fixed_cost(**MODERATE), max_depth=400), "max_depth: 400 exceeds"),
    (lambda d: specdec.SmartSupplier(d, fixed_cost(**MODERATE), budget=1000), "budget: 1000 exceeds"),
    (lambda d: specdec.PromptLookupSupplier(num_pred=300), "num_pred: 300 exceeds"),
    (lambda d: specdec.PromptLookupSupplier(num_pred=100, max_matches=4), "max_matches: 4 continuations of num_pred"),
])
def test_trees_are_bounded_by_positions(pair, make, match):
    target, draft = pair
    with pytest.raises(ValueError, match=match):
        specdec.SpeculativeGenerator(target, make(draft))


def test_retrieval_trees_are_bounded_by_positions(pair, tmp_path):
    store = Datastore.build(None, [np.arange(30) % 9], tmp_path, vocab_size=9, progress=False)
    for kwargs, match in ((dict(budget=300), r"budget: 300 exceeds the target's positions \(256\)"),
                          (dict(continuation=256), "continuation: 256 exceeds")):
        with pytest.raises(ValueError, match=match):
            specdec.SpeculativeGenerator(pair[0], specdec.RetrievalSupplier(store, **kwargs))


def test_memory_estimate_names_the_argument_before_allocating(pair, monkeypatch):
    target, draft = pair
    gen = specdec.SpeculativeGenerator(target, specdec.DraftSupplier(draft, depth=2, topk=90, total_tokens=32))
    ids, mask = ragged_prompts([7])
    monkeypatch.setattr(specdec.generate, "free_memory", lambda device: 50_000, raising=False)
    monkeypatch.setattr(specdec.suppliers.draft.DraftRunner, "start", lambda *a, **k: pytest.fail("allocated"))
    with pytest.raises(ValueError, match=r"topk: a batch of 1 needs about .* GiB .* free on cpu; lower topk"):
        gen.generate(ids, attention_mask=mask, max_new_tokens=5)


# ---------------------------------------------------------------------------------------------- API misuse
@pytest.fixture(scope="module")
def ar_generator(pair):
    return specdec.SpeculativeGenerator(pair[0], specdec.ARSupplier())


def test_masked_positions_may_hold_minus_100(pair, ar_generator):
    ids, mask = ragged_prompts([4, 7])
    ref = reference(pair[0], ids, mask, 6, eos=[])
    ids = ids.masked_fill(mask == 0, -100)
    out = ar_generator.generate(ids, attention_mask=mask, max_new_tokens=np.int64(6), eos_token_id=[], pad_token_id=0)
    assert torch.equal(out.sequences[:, 7:], ref[:, 7:]) and torch.equal(out.sequences[:, :7], ids)


@pytest.mark.parametrize("kwargs, error, match", [
    (dict(eos_token_id="x"), ValueError, "eos_token_id: expected None, a token id"),
    (dict(eos_token_id=[2, -1]), ValueError, "eos_token_id: expected None, a token id"),
    (dict(pad_token_id=99999), ValueError, r"pad_token_id: expected a token id in \[0, 96\), got 99999"),
    (dict(pad_token_id=-5), ValueError, r"pad_token_id: expected a token id in \[0, 96\), got -5"),
    (dict(attention_mask=[[1, 1, 1, 1]]), TypeError, "attention_mask: expected a torch.Tensor or None, got list"),
])
def test_generate_arguments(ar_generator, kwargs, error, match):
    args = dict(input_ids=torch.tensor([[5, 6, 7, 8]]), max_new_tokens=3, **kwargs)
    with pytest.raises(error, match=match):
        ar_generator.generate(**args)


# ---------------------------------------------------------------------------------------------- padded vocabularies
def resized(model, rows: int, seed: int = 3):
    """A copy with `rows` embedding and LM-head rows: the first ones shared, new ones (when larger) random with a
    large head, so that a draft not restricted to the shared ids would propose them."""
    out = copy.deepcopy(model)
    out.resize_token_embeddings(rows, mean_resizing=False)
    if rows > model.config.vocab_size:
        gen = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            out.lm_head.weight[model.config.vocab_size:] = 40 * torch.randn(
                rows - model.config.vocab_size, out.lm_head.weight.shape[1], generator=gen)
    return out


@pytest.fixture(scope="module", params=[80, 120], ids=["smaller", "larger"])
def padded(request, pair):
    target, draft = pair
    return target, resized(draft, request.param)


@pytest.mark.parametrize("make", [
    lambda d: specdec.DraftSupplier(d, mode="chain", depth=4),
    lambda d: specdec.DraftSupplier(d, mode="tree", depth=3, topk=3, total_tokens=10),
    lambda d: specdec.SmartSupplier(d, fixed_cost(**MODERATE, batch_size=3), topk=3, frontier=3, max_depth=4),
], ids=["chain", "tree", "smart"])
def test_drafts_with_padded_vocabularies_keep_the_output(padded, make):
    target, draft = padded
    ids, mask = ragged_prompts([5, 11, 8], seed=2)  # prompt ids up to 95: some beyond a smaller draft's rows
    supplier = make(draft)
    out = specdec.SpeculativeGenerator(target, supplier).generate(ids, attention_mask=mask, max_new_tokens=16,
                                                                  eos_token_id=[], pad_token_id=0)
    assert torch.equal(out.sequences, reference(target, ids, mask, 16, eos=[]))
    assert out.stats.mean_accepted_length > 1.0  # the shared rows drafted usefully
    state = DecodeState.begin(ids, (mask == 0).sum(1), max_new_tokens=4, capacity=96, eos_token_ids=[], pad_token_id=0)
    supplier.start(state)
    tree = supplier.propose(state)
    assert bool((tree.tokens[:, 1:][tree.valid[:, 1:]] < min(80, VOCAB)).all() if draft.config.vocab_size < VOCAB
                else (tree.tokens < VOCAB).all())  # never an id only one model has


def test_sampled_draft_distribution_is_zero_past_the_shared_ids(pair):
    target, draft = pair[0], resized(pair[1], 80)
    supplier = specdec.DraftSupplier(draft, mode="tree", depth=3, topk=2, total_tokens=7)
    specdec.SpeculativeGenerator(target, supplier)
    ids, mask = ragged_prompts([6, 9])
    gen = torch.Generator().manual_seed(0)
    state = DecodeState.begin(ids, (mask == 0).sum(1), max_new_tokens=4, capacity=64, eos_token_ids=[], pad_token_id=0,
                              sampling=Sampling(1.0), generator=gen)
    supplier.start(state)
    tree = supplier.propose(state)
    assert tree.draft_probs.shape[-1] == VOCAB and not tree.draft_probs[..., 80:].any()
    assert torch.allclose(tree.draft_probs[:, 0].sum(-1), torch.ones(2))
    out = specdec.SpeculativeGenerator(target, supplier).generate(ids, attention_mask=mask, max_new_tokens=8,
                                                                  temperature=1.0, generator=gen, pad_token_id=0)
    assert out.sequences.shape[1] > ids.shape[1]


@pytest.mark.parametrize("rows", [80, 120])
def test_scorers_with_padded_vocabularies(pair, rows):
    target = pair[0]
    scorer = resized(pair[1], rows)
    bs = specdec.BranchScorer(scorer)
    bs.attach(target)
    ids, mask = ragged_prompts([6])
    bs.start(DecodeState.begin(ids, (mask == 0).sum(1), max_new_tokens=4, capacity=64, eos_token_ids=[],
                               pad_token_id=0), region=8)
    tree = specdec.TreeBatch.from_parents([[int(ids[0, -1]), 90, 10, 11]], [[-1, 0, 0, 2]])  # 90: beyond 80 rows
    logp = bs.node_logprobs(tree)[0]
    known = torch.where(ids < rows, ids, 0)  # ids the scorer cannot embed are fed as 0
    expect = torch.log_softmax(scorer(known).logits[0, -1, :min(rows, VOCAB)].float(), -1)
    assert torch.allclose(logp[2], expect[10], atol=1e-4)  # softmax over the shared rows only
    if rows < 90:
        assert logp[1] == float("-inf") and torch.isfinite(logp[3])  # id 90 is beyond the scorer's rows
    else:
        assert torch.allclose(logp[1], expect[90], atol=1e-4)
    filt = specdec.FixedThresholdFilter(scorer, 0.02)
    ids, mask = ragged_prompts([9, 14], seed=4)
    gen = specdec.SpeculativeGenerator(target, specdec.PromptLookupSupplier(), filt)
    out = gen.generate(ids, attention_mask=mask, max_new_tokens=12, eos_token_id=[], pad_token_id=0)
    assert torch.equal(out.sequences, reference(target, ids, mask, 12, eos=[]))
