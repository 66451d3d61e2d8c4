"""The verifier (`TreeVerifier`): prefill and verify against a `TreeCache`, the prompt riding the first
verification, and bad input refused with a ValueError naming the argument before the cache changes."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import specdec
from specdec import TreeBatch, TreeVerifier
from tests.helpers import make_model, make_tree, ragged_prompts


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


def test_temperature(target):
    assert TreeVerifier(target, temperature=0.7).temperature == 0.7  # sampling: tests/core/test_sampling.py
    with pytest.raises(ValueError, match="temperature: expected a finite number >= 0"):
        TreeVerifier(target, temperature=-1.0)


def test_tree_on_another_device_than_the_cache(target):
    verifier, cache, root = prefilled(target)
    tree = TreeBatch(torch.zeros(2, 1, dtype=torch.int64, device="meta"), torch.full((2, 1), -1, device="meta"),
                     torch.ones(2, dtype=torch.int64, device="meta"))
    with pytest.raises(ValueError, match="tree: on meta, the cache on cpu"):
        verifier.verify(tree, cache)


@pytest.mark.hf
@pytest.mark.parametrize("ids, start, error, match", [
    (torch.ones(2, 4, dtype=torch.int64), torch.zeros(1, dtype=torch.int64), ValueError, r"start: expected a \[2\]"),
    (torch.ones(2, 4, dtype=torch.int64), torch.tensor([-1, 0]), ValueError, r"start: pad counts must lie in \[0, 4\]"),
    (torch.ones(2, 4, dtype=torch.int64), torch.tensor([5, 0]), ValueError, r"start: pad counts must lie in \[0, 4\]"),
    (torch.ones(2, 4, dtype=torch.int64), torch.tensor([0.0, 1.0]), ValueError, r"start: expected a \[2\] int64"),
    (torch.ones(4, dtype=torch.int64), torch.zeros(2, dtype=torch.int64), ValueError,
     r"input_ids: expected a \[2, P\]"),
    (torch.full((2, 4), 500), torch.tensor([0, 2]), ValueError, r"input_ids: token ids outside .* \[0, 96\)"),
])
def test_prefill_arguments(target, ids, start, error, match):
    verifier = specdec.TreeVerifier(target)
    cache = verifier.new_cache(2, 16)
    with pytest.raises(error, match=match):
        verifier.prefill(cache, ids, start)
    assert not cache.host_length.any()
    verifier.prefill(cache, torch.full((2, 4), -100).masked_fill(torch.arange(4) >= 2, 5), torch.tensor([2, 2]))
    assert cache.host_length.tolist() == [4, 4]


@pytest.mark.parametrize("padded", [False, True])
@pytest.mark.parametrize("T", [1, 5])
def test_prompt_rides_the_first_verification(padded, T):
    """verify(prompt=...) equals prefill then verify: the same acceptance, the same committed K/V."""
    target = make_model("llama")
    ids, mask = ragged_prompts([9, 6] if padded else [9, 9])
    start = (mask == 0).sum(1)
    shape = make_tree("random", 2, T, seed=T)  # rooted at each prompt's last token; distinct tokens
    tokens = torch.cat([ids[:, -1:], torch.arange(10, 9 + T).expand(2, T - 1)], 1)
    tree = TreeBatch.from_parents(tokens, shape.parents, shape.num_nodes)
    results = []
    for fused in (True, False):
        verifier = specdec.TreeVerifier(target)
        cache = verifier.new_cache(2, 40)
        prompt = specdec.verify.PromptBlock(ids[:, :-1], start)
        if fused:
            acc = verifier.verify(tree, cache, prompt=prompt)
        else:
            verifier.prefill(cache, *prompt)
            acc = verifier.verify(tree, cache)
        results.append((acc, cache))
    (a, ca), (b, cb) = results
    assert torch.equal(a.tokens, b.tokens) and torch.equal(a.node_index, b.node_index)
    assert ca.host_length.tolist() == cb.host_length.tolist() and torch.equal(ca.length, cb.length)
    for la, lb in zip(ca.layers, cb.layers):
        for b_, n in enumerate(ca.host_length):
            s = int(start[b_])
            torch.testing.assert_close(la.keys[b_, :, s:n], lb.keys[b_, :, s:n], atol=1e-5, rtol=1e-5)


def test_prompt_block_errors():
    target = make_model("llama")
    verifier = specdec.TreeVerifier(target)
    cache = verifier.new_cache(1, 20)
    tree = TreeBatch.from_parents([[5]], [[-1]])
    with pytest.raises(ValueError, match=r"prompt: input_ids: expected a \[1, P\] tensor"):
        verifier.verify(tree, cache, prompt=specdec.verify.PromptBlock(torch.zeros(2, 3, dtype=torch.int64),
                                                                      torch.zeros(1, dtype=torch.int64)))
    verifier.verify(tree, cache)
    with pytest.raises(ValueError, match="cache: a prompt block needs an empty cache"):
        verifier.verify(tree, cache, prompt=specdec.verify.PromptBlock(torch.zeros(1, 3, dtype=torch.int64),
                                                                      torch.zeros(1, dtype=torch.int64)))
