"""What a sampled draft tree's losslessness rests on: Gumbel-top-k draws are sequential draws without
replacement, and the recursive rule handles a q whose support runs out."""

from __future__ import annotations

import numpy as np
import torch
from scipy.stats import chisquare

from specdec.sampling import Sampling, sample_accept, sample_without_replacement
from specdec.tree import TreeBatch


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
