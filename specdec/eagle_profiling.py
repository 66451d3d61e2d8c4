"""The drafter's parts of a step cost profile when the drafter is an EAGLE head (`specdec.profile(target,
head)`): the head's layer forward of n tree nodes per row and its catch-up over m committed pairs, timed the
way `EagleRunner` runs them (the head's own one-layer forward, its logits mapped to the target's ids).

The head's cache holds one layer, so its context costs little; what a head forward costs is its arithmetic,
which is why EAGLE trees and SMART's planner suit each other: the planner prices each layer from these
numbers (and corrects their level online from the loop's timers).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable

import numpy as np
import torch

from .cache import TreeCache
from .tree import TreeBatch

if TYPE_CHECKING:
    from .eagle import EagleHead

__all__ = ["head_cache", "head_catch_up_steps", "head_layer_steps", "random_tree"]


def random_tree(batch_size: int, n: int, gen: torch.Generator, vocab: int, device: torch.device) -> TreeBatch:
    """A random recursive tree of n nodes per row (parent of node i uniform in [0, i)): depth ~ ln n. The
    trees of every profile, the target's and a draft model's too (`specdec.profiling`)."""
    i = torch.arange(n)
    parents = (torch.rand(batch_size, n, generator=gen) * i).floor().to(torch.int64)
    parents[:, 0] = -1
    tokens = torch.randint(0, vocab, (batch_size, n), generator=gen)
    return TreeBatch(tokens.to(device), parents.to(device), torch.full((batch_size,), n, device=device))


def head_cache(head: EagleHead, batch_size: int, context_len: int, extra: int) -> TreeCache:
    """The head's cache holding context_len committed pairs per row (random K/V: values do not change cost)."""
    cache = head.new_cache(batch_size, context_len + extra)
    for layer in cache.layers:
        layer.keys.normal_()
        layer.values.normal_()
    cache.commit_prefix(torch.full((batch_size,), context_len, dtype=torch.int64, device=cache.device),
                        np.full(batch_size, context_len))
    return cache


def _random_tree_mask(batch_size: int, n: int, gen: torch.Generator, device: torch.device):
    return random_tree(batch_size, n, gen, 2, device).ancestor_mask  # the same random trees the model profiles use


def head_layer_steps(head: EagleHead, cache: TreeCache, sizes: tuple[int, ...], backend: str,
                     gen: torch.Generator) -> list[Callable[[], None]]:
    """One callable per size n: what `EagleRunner.forward_layer` computes for n frontier nodes per row as
    SMART asks for it (the head's forward over (token, parent output) pairs, the logits over its draft
    vocabulary: `narrow=True`), rolled back."""
    B, H = cache.batch_size, head.config.hidden_size
    rope = head.rope_table(cache.capacity)
    steps = []
    for n in sizes:
        tokens = torch.randint(0, head.config.vocab_size, (B, n), generator=gen).to(cache.device)
        parents = torch.randn(B, n, H, generator=gen).to(device=cache.device, dtype=head.fc.weight.dtype)
        positions = cache.positions()[:, None].expand(B, n).contiguous()
        mask = _random_tree_mask(B, n, gen, cache.device)

        def step(tokens=tokens, parents=parents, positions=positions, mask=mask):
            hidden = head(tokens, parents, positions, cache, mask, rope, project=False, backend=backend)
            head.draft_logits(hidden)
            cache.rollback()

        steps.append(step)
    return steps


def head_catch_up_steps(head: EagleHead, cache: TreeCache, backlogs: tuple[int, ...], backend: str,
                        gen: torch.Generator) -> list[Callable[[], None]]:
    """One callable per backlog m: what `EagleRunner.catch_up` computes for m pairs per row as SMART asks for
    it (the projection of the target's features, a chain forward, its commit, the logits at the root over the
    draft vocabulary), then undone."""
    from .tree import TreeBatch

    B = cache.batch_size
    width = head.fc.in_features if head.config.kind == "eagle3" else head.config.hidden_size
    rope = head.rope_table(cache.capacity)
    steps = []
    for m in backlogs:
        tokens = torch.randint(0, head.config.vocab_size, (B, m), generator=gen).to(cache.device)
        features = torch.randn(B, m, width, generator=gen).to(device=cache.device, dtype=head.fc.weight.dtype)
        count = torch.full((B,), m, dtype=torch.int64, device=cache.device)
        chain = TreeBatch.chain(tokens, count)
        positions = cache.positions()[:, None] + torch.arange(m, device=cache.device)

        def step(tokens=tokens, features=features, count=count, m=m, chain=chain, positions=positions):
            hidden = head(tokens, features, positions, cache, chain.ancestor_mask, rope, project=True,
                          backend=backend)
            cache.commit_prefix(count, np.full(B, m))
            head.draft_logits(hidden[:, -1])
            cache.length -= count  # undo the commit: the next call starts from the same context
            cache.host_length -= m

        steps.append(step)
    return steps
