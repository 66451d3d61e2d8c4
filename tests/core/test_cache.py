"""The tree cache (`TreeCache`): writes, commits and their shortcuts."""

from __future__ import annotations

import numpy as np
import torch

from specdec.cache import TreeCache


def test_cache_writes_and_commits_take_shortcuts_with_the_same_result():
    """Equal lengths write by slice, ragged ones by scatter; a kept prefix commits without moving K/V."""
    B, H, D, T = 2, 2, 4, 3
    new = torch.randn(B, H, T, D)

    def written(lengths):
        cache = TreeCache(1, B, H, D, 16, dtype=torch.float32, device="cpu")
        cache.commit_prefix(torch.tensor(lengths), np.array(lengths))
        cache.reserve(T)
        cache.update(new, -new, 0)
        cache.advance(T)
        return cache

    for lengths in ([4, 4], [4, 6]):
        cache = written(lengths)
        for b, n in enumerate(lengths):
            assert torch.equal(cache.layers[0].keys[b, :, n:n + T], new[b])
            assert torch.equal(cache.layers[0].values[b, :, n:n + T], -new[b])
    index, count = torch.tensor([[0, 1, -1], [0, 1, 2]]), torch.tensor([2, 3])
    fast, slow = written([4, 6]), written([4, 6])
    fast.commit(index, count, count.numpy(), index.numpy())
    slow.commit(index, count, count.numpy())
    assert fast.host_length.tolist() == slow.host_length.tolist() == [6, 9]
    for b, n in enumerate(fast.host_length):  # committed slots agree (the slow path also scribbles on free ones)
        assert torch.equal(fast.layers[0].keys[b, :, :n], slow.layers[0].keys[b, :, :n])
    moved, ref = written([4, 4]), written([4, 4])
    jump = torch.tensor([[0, 2], [0, 1]])  # row 0 keeps node 2 after the root: K/V must move
    moved.commit(jump, torch.tensor([2, 2]), np.array([2, 2]), jump.numpy())
    assert torch.equal(moved.layers[0].keys[0, :, 5], new[0, :, 2])
    assert torch.equal(moved.layers[0].keys[1, :, 5], ref.layers[0].keys[1, :, 5])
