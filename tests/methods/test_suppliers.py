"""Suppliers' trees: structure and hand-worked prompt-lookup matches."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import specdec
from specdec.state import DecodeState
from specdec.suppliers.trie import prefix_trie
from tests.helpers import make_model, ragged_prompts


def state_for(ids, mask, capacity=64):
    return DecodeState.begin(ids, (mask == 0).sum(1), max_new_tokens=8, capacity=capacity, eos_token_ids=[],
                             pad_token_id=0)


def test_prompt_lookup_prefers_longest_ngram_and_recent_matches():
    #        0  1  2  3  4  5  6  7  8  9 10 11
    row = [0, 0, 5, 6, 7, 8, 5, 6, 9, 4, 6, 5, 6]  # two pads, then context ending in "5 6"
    ids = torch.tensor([row])
    mask = (ids != 0).long()
    sup = specdec.PromptLookupSupplier(max_ngram=2, min_ngram=1, num_pred=3, max_matches=4)
    tree = sup.propose(state_for(ids, mask))
    # bigram "5 6" occurs at columns 2 and 6: continuations [9, 4, 6] (recent) and [7, 8, 5]
    assert tree.tokens[0].tolist() == [6, 9, 7, 4, 8, 6, 5]
    assert tree.parents[0].tolist() == [-1, 0, 0, 1, 2, 3, 4]
    tree.validate(vocab_size=10)


def test_prompt_lookup_without_match_is_root_only_and_batches_are_ragged():
    ids = torch.tensor([[3, 4, 5, 6], [4, 4, 4, 4]])
    sup = specdec.PromptLookupSupplier(max_ngram=2, num_pred=2, max_matches=2)
    tree = sup.propose(state_for(ids, torch.ones_like(ids)))
    assert tree.num_nodes.tolist() == [1, 3]
    assert tree.tokens[1, :3].tolist() == [4, 4, 4]  # "4 4" -> [4, 4]; the two matches share the trie
    tree.validate()


def test_trie_merges_equal_prefixes():
    cont = np.array([[[1, 2, 3], [1, 2, 4], [1, 5, -1], [-1, -1, -1]]])
    trie = prefix_trie(cont)
    assert trie.num_nodes.tolist() == [6]
    assert trie.tokens[0, 1:].tolist() == [1, 2, 5, 3, 4]
    assert trie.parents[0].tolist() == [-1, 0, 1, 1, 2, 2]
    assert trie.counts[0].tolist() == [3, 3, 2, 1, 1, 1]


@pytest.mark.parametrize("mode, depth, topk, total", [("chain", 4, 1, 5), ("tree", 3, 2, 6), ("tree", 4, 3, 20),
                                                      ("tree", 1, 4, 9)])
def test_draft_trees_are_valid_and_sized(mode, depth, topk, total):
    target = make_model("qwen3")
    ids, mask = ragged_prompts([6, 3])
    sup = specdec.DraftSupplier(target, mode=mode, depth=depth, topk=topk, total_tokens=total)
    sup.attach(target)
    state = state_for(ids, mask)
    sup.start(state)
    tree = sup.propose(state)
    want = min(total, 1 + topk + (depth - 1) * topk * topk) if mode == "tree" else depth + 1
    assert tree.size == want and tree.num_nodes.tolist() == [want, want]
    tree.validate(vocab_size=96)
    assert int(tree.depth.max()) <= depth == tree.max_depth
    assert torch.equal(tree.tokens[:, 0], ids[:, -1])
    # path log-probs never grow along a path, and the kept set is the best by log-prob
    parent_logp = tree.logp.gather(1, tree.parents.clamp(min=0))
    assert bool((tree.logp[:, 1:] <= parent_logp[:, 1:] + 1e-6).all())
    # the draft's greedy choice at the root is always in the tree
    logits = target(ids, attention_mask=mask).logits[:, -1]
    assert bool((tree.tokens[:, 1:] == logits.argmax(-1)[:, None]).any(1).all())
