"""The sampled draft tree (`DraftSupplier(mode="tree")` at temperature > 0) and what its losslessness rests
on: Gumbel-top-k draws are sequential draws without replacement, the tree's structure is fixed before its
children are drawn, the recursive rule handles a q whose support runs out, and a tree that breaks the
conditions is caught by the distribution test. The distribution itself (with and without top-k/top-p)
is `tests/core/test_sampling.py::test_first_two_tokens_follow_the_target[tree-*]`."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy.stats import chisquare

import specdec
from specdec.sampling import Sampling, sample_accept, sample_without_replacement
from specdec.state import DecodeState
from specdec.suppliers import draft as draft_module
from specdec.tree import TreeBatch
from tests.helpers import (SAMPLE_ROWS, TINY_PROMPT, WARPS, assert_matches, draw_two_tokens, exact_two_tokens,
                           make_model, tiny_pair)


def test_gumbel_top_k_is_sequential_sampling_without_replacement():
    """The ordered pair (first, second) has probability p(a) p(b) / (1 - p(a)); zero-probability tokens
    come only after the support is used up."""
    p = torch.tensor([0.5, 0.25, 0.15, 0.1, 0.0])
    n = 200_000
    draws = sample_without_replacement(p.expand(n, 5), 2, torch.Generator().manual_seed(0))
    assert (draws[:, 0] != draws[:, 1]).all() and (draws != 4).all()
    counts = np.bincount((draws[:, 0] * 5 + draws[:, 1]).numpy(), minlength=25).reshape(5, 5)[:4, :4]
    exact = (p[:, None] * p[None, :] / (1 - p[:, None])).numpy()[:4, :4]
    np.fill_diagonal(exact, 0.0)
    off = ~np.eye(4, dtype=bool)
    exact = exact.astype(np.float64)[off]
    assert chisquare(counts[off], exact / exact.sum() * counts[off].sum()).pvalue > 1e-3
    # support of 2 tokens, 3 draws: the third is a zero-probability token
    third = sample_without_replacement(torch.tensor([0.0, 0.7, 0.0, 0.3]).expand(100, 4), 3, torch.Generator())
    assert (third[:, :2].sort(-1).values == torch.tensor([1, 3])).all() and (third[:, 2] % 2 == 0).all()


def test_recursive_rule_when_q_runs_out():
    """Root with children a, b, c; q allows only a, so b and c come after q's support is exhausted. The
    emitted token must still follow p (the rule falls back to accepting with p(c) for b and c)."""
    V, n = 6, 200_000
    p_logits = torch.tensor([0.3, 0.1, 0.25, 0.05, 0.2, 0.1]).log()
    tree = TreeBatch.from_parents([[0, 1, 2, 3]], [[-1, 0, 0, 0]])
    q = torch.zeros(1, 4, V)
    q[0, 0, 1] = 1.0  # q at the root: only token 1 (node 1); nodes 2 and 3 (tokens 2, 3) have q = 0
    tree = TreeBatch(tree.tokens.expand(n, 4), tree.parents.expand(n, 4), tree.num_nodes.expand(n),
                     draft_probs=q.expand(n, 4, V))
    tokens, num_accepted, _ = sample_accept(tree, p_logits.expand(n, 4, V), Sampling(1.0), torch.Generator().manual_seed(0))
    first = tokens[:, 0]
    counts = np.bincount(first.numpy(), minlength=V)
    want = p_logits.exp().double().numpy()
    assert chisquare(counts, want / want.sum() * n).pvalue > 1e-3
    assert ((num_accepted == 1) == (first <= 3) & (first >= 1)).all()  # candidates 1-3 are emitted by acceptance


def _tree_supplier(draft, target, s: Sampling, rows: int, seed: int, **kw):
    sup = specdec.DraftSupplier(draft, mode="tree", **kw)
    sup.attach(target)
    ids = torch.tensor([[5, 7, 5, 9, 11]]).expand(rows, -1).contiguous()
    state = DecodeState.begin(ids, torch.zeros(rows, dtype=torch.int64), max_new_tokens=4, capacity=64,
                              eos_token_ids=[], pad_token_id=0, sampling=s, generator=torch.Generator().manual_seed(seed))
    sup.start(state)
    return sup, state


@pytest.fixture(scope="module")
def pair():
    return tiny_pair()


@pytest.fixture(scope="module")
def models():
    return make_model("llama", seed=0), make_model("llama", seed=1)


# (depth, topk, total_tokens) -> kept nodes per layer: whole layers, then a suffix of the last one
SHAPES = [((4, 2, 10), [2, 4, 3]), ((3, 3, 40), [3, 9, 9]), ((2, 2, 2), [1]), ((5, 1, 4), [1, 1, 1]),
          ((3, 3, 8), [3, 4])]


@pytest.mark.parametrize("shape, sizes", SHAPES, ids=str)
@pytest.mark.parametrize("s", [WARPS[0], Sampling(1.0, top_k=2, top_p=0.5)], ids=str)
def test_sampled_tree_structure(models, shape, sizes, s):
    """Layer sizes as designed; in a layer that is forwarded, the `topk` nodes of highest path probability
    under q get `topk` children each, grouped by parent, best parent first (in the last layer, the suffix
    of that order is cut); every other node is a leaf; siblings distinct; draft_probs is the warped q of
    each node with children (zeros at nodes never forwarded); children lie in q's support until it runs out; seeded
    proposals repeat."""
    target, draft = models
    depth, k, total = shape
    B = 8
    sup, state = _tree_supplier(draft, target, s, B, seed=0, depth=depth, topk=k, total_tokens=total)
    tree = sup.propose(state)
    assert sup._sampled_layer_sizes() == sizes and tree.size == 1 + sum(sizes) and tree.max_depth == len(sizes)
    tree.validate(96)  # topological order, distinct siblings
    q = tree.draft_probs
    assert q is not None and q.shape == (B, tree.size, 96) and q.dtype == torch.float32
    parents, tokens = tree.parents, tree.tokens
    has_children = torch.zeros(B, tree.size, dtype=torch.bool).scatter_(1, parents[:, 1:], True)
    mass = q.sum(-1)  # 1 at forwarded nodes (the last layer's cut can leave one without children), else 0
    assert torch.allclose(mass[has_children], torch.ones(())) and torch.allclose(mass * (1 - mass), torch.zeros(()), atol=1e-5)
    # path probability under q, from the carried rows
    path_q = torch.ones(B, tree.size)
    for i in range(1, tree.size):
        path_q[:, i] = path_q.gather(1, parents[:, i:i + 1])[:, 0] * q[torch.arange(B), parents[:, i], tokens[:, i]]
    start = 1
    for d, n in enumerate(sizes[:-1], start=1):
        layer = slice(start, start + n)
        best = path_q[:, layer].topk(k, -1).values
        kids = parents[:, start + n:start + n + sizes[d]] - start  # children of the frontier, grouped by parent
        want_parents = torch.arange(k).repeat_interleave(k)[:sizes[d]]  # frontier rank of each child's parent
        front_rank = torch.zeros(B, n, dtype=torch.int64)
        for b in range(B):
            order = kids[b].unique_consecutive()
            assert len(order) == (sizes[d] + k - 1) // k
            front_rank[b, order] = torch.arange(len(order))
            assert torch.allclose(path_q[b, layer][order], best[b, :len(order)])
            assert torch.equal(front_rank[b].gather(0, kids[b]), want_parents)
        start += n
    # children inside q's support first: a child of q-probability 0 only after all the support was drawn
    child_q = q[torch.arange(B)[:, None], parents.clamp(min=0), tokens][:, 1:]  # [B, T-1]
    support = (q > 0).sum(-1).gather(1, parents[:, 1:])  # [B, T-1]
    rank = torch.stack([(parents[:, 1:j + 1] == parents[:, j:j + 1]).sum(1) for j in range(1, tree.size)], 1) - 1
    assert torch.equal(child_q > 0, rank < support)
    again = _tree_supplier(draft, target, s, B, seed=0, depth=depth, topk=k, total_tokens=total)
    other = _tree_supplier(draft, target, s, B, seed=1, depth=depth, topk=k, total_tokens=total)
    assert torch.equal(again[0].propose(again[1]).tokens, tokens)
    if s.top_k is None and tree.size > 2:  # top-k 2 with top-p 0.5 leaves these sharp drafts 1-2 tokens: no choice
        assert not torch.equal(other[0].propose(other[1]).tokens, tokens)


def test_greedy_tree_carries_no_draft_probs(models):
    target, draft = models
    sup, state = _tree_supplier(draft, target, Sampling(), 2, seed=0, depth=3, topk=2, total_tokens=6)
    assert sup.propose(state).draft_probs is None


def test_a_top_k_tree_carrying_q_is_caught(pair, tmp_path, monkeypatch):
    """The sampling is what makes the recursive rule lossless: the same tree with each node's children
    taken as q's top-k (deterministic, by value) while still carrying q fails the distribution test."""
    target, draft = pair
    monkeypatch.setattr(draft_module, "sample_without_replacement",
                        lambda probs, k, generator=None: probs.topk(k, -1).indices)
    s = WARPS[0]
    draws, _ = draw_two_tokens(target, draft, "tree", None, s, SAMPLE_ROWS, tmp_path)
    with pytest.raises(AssertionError, match="chi-square"):
        assert_matches(draws, exact_two_tokens(target, s), "top-k children with q")


@pytest.mark.slow
@pytest.mark.parametrize("s", [Sampling(0.8, top_k=2), Sampling(1.0, top_p=0.35)], ids=str)
def test_tree_wider_than_q_support_follows_the_target(pair, s):
    """3 children per node under a warp that leaves the draft 2 (top-k 2) or few (top-p) tokens: the
    children past q's support go through the deterministic fallback of the recursive rule, and the first
    two tokens still follow the target (the rule without the fallback fails this: p ~ 0)."""
    target, draft = pair
    gen = specdec.SpeculativeGenerator(target, specdec.DraftSupplier(draft, mode="tree", depth=2, topk=3,
                                                                     total_tokens=13))
    ids = torch.tensor([TINY_PROMPT]).expand(SAMPLE_ROWS, -1).contiguous()
    out = gen.generate(ids, max_new_tokens=2, eos_token_id=[], pad_token_id=0, temperature=s.temperature,
                       top_k=s.top_k, top_p=s.top_p, generator=torch.Generator().manual_seed(0))
    assert_matches(out.sequences[:, len(TINY_PROMPT):], exact_two_tokens(target, s), str(s))
