"""Bad input: a ValueError naming the argument, raised before any cache or sequence changes."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import specdec
from conftest import make_model, ragged_prompts
from specdec import TreeBatch, TreeVerifier


@pytest.fixture(scope="module")
def target():
    return make_model("llama")


def prefilled(target, capacity=32):
    verifier = TreeVerifier(target)
    ids, mask = ragged_prompts([5, 7])
    cache = verifier.new_cache(2, capacity)
    verifier.prefill(cache, ids[:, :-1], (mask == 0).sum(1))
    return verifier, cache, ids[:, -1]


@pytest.mark.parametrize("tokens, parents, nodes, match", [
    ([[9, 4, 5], [9, 4, 5]], [[-1, 2, 0], [-1, 0, 0]], None, "parents: row 0 node 1 has parent 2"),
    ([[9, 4, 4], [9, 4, 5]], [[-1, 0, 0], [-1, 0, 0]], None, "tokens: row 0 nodes 1 and 2 are siblings"),
    ([[9, 4, 5], [9, 4, 500]], [[-1, 0, 0], [-1, 0, 0]], None, "tokens: row 1 node 2 holds id 500"),
    ([[9, 4, 5], [9, 4, 5]], [[-1, 0, 0], [-1, 0, 0]], [3, 4], "num_nodes: row 1 has 4 nodes"),
])
def test_invalid_tree_leaves_cache_untouched(target, tokens, parents, nodes, match):
    verifier, cache, root = prefilled(target)
    before = cache.host_length.copy()
    keys = cache.layers[0].keys.clone()
    tree = TreeBatch(torch.tensor(tokens), torch.tensor(parents),
                     torch.tensor(nodes if nodes else [3, 3]))
    with pytest.raises(ValueError, match=match):
        verifier.verify(tree, cache)
    assert np.array_equal(cache.host_length, before) and torch.equal(cache.layers[0].keys, keys)
    ok = TreeBatch.from_parents(torch.stack([root, root], 1), [[-1, 0]] * 2)
    assert verifier.verify(ok, cache).num_accepted.shape == (2,)  # still usable


def test_tree_larger_than_free_capacity(target):
    verifier, cache, root = prefilled(target, capacity=12)  # 6 slots used by the longest row
    chain = TreeBatch.from_parents(torch.stack([root] + [torch.full_like(root, t) for t in range(3, 10)], 1),
                                   [list(range(-1, 7))] * 2)
    keys = cache.layers[1].keys.clone()
    with pytest.raises(ValueError, match="tree: 8 nodes do not fit in the cache"):
        verifier.verify(chain, cache)
    assert torch.equal(cache.layers[1].keys, keys) and cache.tree_len == 0


def test_tree_and_cache_batch_mismatch(target):
    verifier, cache, root = prefilled(target)
    with pytest.raises(ValueError, match="tree: batch of 1 rows, the cache holds 2"):
        verifier.verify(TreeBatch.from_parents([[5]], [[-1]]), cache)


@pytest.mark.parametrize("kwargs, match", [
    (dict(max_new_tokens=0), "max_new_tokens: expected an int > 0"),
    (dict(max_new_tokens=-3), "max_new_tokens: expected an int > 0"),
    (dict(max_new_tokens=250), "max_new_tokens: a 7-token prompt plus 250 new tokens exceeds the model's 256"),
    (dict(attention_mask=torch.tensor([[1, 1, 0, 1, 1, 1, 1], [0] * 7])), "attention_mask: row 0 is not left-padded"),
    (dict(attention_mask=torch.ones(2, 6, dtype=torch.int64)), r"attention_mask: expected \(2, 7\)"),
    (dict(input_ids=torch.full((2, 7), 400)), r"input_ids: token ids outside the target's vocabulary \[0, 96\)"),
    (dict(input_ids=torch.ones(2, 7, dtype=torch.int32)), "input_ids: expected int64"),
    (dict(input_ids=torch.ones(7, dtype=torch.int64)), r"input_ids: expected a \[B, P\] tensor"),
    (dict(input_ids=torch.ones(2, 7, dtype=torch.int64, device="meta")), "input_ids: on meta"),
])
def test_generate_argument_errors_then_generator_still_works(target, kwargs, match):
    gen = specdec.SpeculativeGenerator(target, specdec.DraftSupplier(target, mode="chain", depth=3))
    ids, mask = ragged_prompts([7, 4])
    args = dict(input_ids=ids, attention_mask=mask, max_new_tokens=5, pad_token_id=0)
    args.update(kwargs)
    with pytest.raises((ValueError, TypeError), match=match):
        gen.generate(**args)
    good = gen.generate(ids, attention_mask=mask, max_new_tokens=5, pad_token_id=0, eos_token_id=[])
    ref = target.generate(ids, attention_mask=mask, max_new_tokens=5, do_sample=False, pad_token_id=0, eos_token_id=None)
    assert torch.equal(good.sequences, ref)


def test_prompt_longer_than_positions(target):
    gen = specdec.SpeculativeGenerator(target, specdec.ARSupplier())
    with pytest.raises(ValueError, match="max_new_tokens: a 300-token prompt"):
        gen.generate(torch.full((1, 300), 5), max_new_tokens=1)


def test_temperature(target):
    assert TreeVerifier(target, temperature=0.7).temperature == 0.7  # sampling: tests/test_sampling.py
    with pytest.raises(ValueError, match="temperature: expected a finite number >= 0"):
        TreeVerifier(target, temperature=-1.0)


@pytest.mark.parametrize("kwargs, match", [
    (dict(mode="beam"), "mode: expected 'chain' or 'tree'"),
    (dict(depth=0), "depth: expected an int >= 1"),
    (dict(topk=0), "topk: expected an int >= 1"),
    (dict(total_tokens=1), "total_tokens: expected an int >= 2"),
    (dict(topk=500), "topk: 500 exceeds the draft's vocabulary of 96"),
])
def test_draft_supplier_arguments(target, kwargs, match):
    with pytest.raises(ValueError, match=match):
        specdec.DraftSupplier(target, **kwargs)


@pytest.mark.parametrize("kwargs, match", [
    (dict(max_ngram=0), "max_ngram: expected an int >= 1"),
    (dict(min_ngram=4, max_ngram=2), "min_ngram: 4 exceeds max_ngram 2"),
    (dict(num_pred=0), "num_pred: expected an int >= 1"),
])
def test_prompt_lookup_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        specdec.PromptLookupSupplier(**kwargs)


def test_supplier_type():
    with pytest.raises(TypeError, match="supplier: expected a specdec Supplier"):
        specdec.SpeculativeGenerator(make_model("llama"), supplier="chain")


def test_draft_on_another_device(target):
    draft = make_model("llama").to("meta")
    with pytest.raises(ValueError, match="draft: on meta, the target on cpu"):
        specdec.SpeculativeGenerator(target, specdec.DraftSupplier(draft))


def test_tree_on_another_device_than_the_cache(target):
    verifier, cache, root = prefilled(target)
    tree = TreeBatch(torch.zeros(2, 1, dtype=torch.int64, device="meta"), torch.full((2, 1), -1, device="meta"),
                     torch.ones(2, dtype=torch.int64, device="meta"))
    with pytest.raises(ValueError, match="tree: on meta, the cache on cpu"):
        verifier.verify(tree, cache)
