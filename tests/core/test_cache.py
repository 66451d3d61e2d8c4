"""The tree cache (`TreeCache`): construction, writes, commits and their shortcuts, the HF Cache interface.

Most tests use tiny CPU caches whose keys name the node that wrote them (`block`), so a slot's content says
where it came from; values are always the negated keys, so a test that checks keys checks values too."""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch

from specdec.cache import TreeCache
from tests.helpers import make_model

H, D = 2, 4  # key/value heads and head dim of the hand-built caches


def new_cache(batch_size: int = 2, capacity: int = 16, num_layers: int = 1) -> TreeCache:
    return TreeCache(num_layers, batch_size, H, D, capacity, dtype=torch.float32, device="cpu")


def block(B: int, T: int, tag: int) -> torch.Tensor:
    """[B, H, T, D] keys whose every element names its node: tag * 100 + 10 * row + node."""
    ids = tag * 100 + 10 * torch.arange(B)[:, None] + torch.arange(T)[None, :]  # [B, T]
    return ids[:, None, :, None].expand(B, H, T, D).float().contiguous()


def forward(cache: TreeCache, T: int, tag: int) -> None:
    """What one tree forward does to the cache: reserve, every layer's update (values = -keys), advance."""
    cache.reserve(T)
    keys = block(cache.batch_size, T, tag)
    for i in range(len(cache.layers)):
        cache.update(keys, -keys, i)
    cache.advance(T)


def committed(lengths: list[int], **kw) -> TreeCache:
    """A cache whose row b holds lengths[b] committed slots, slot j written by node 100 + 10 * b + j."""
    cache = new_cache(len(lengths), **kw)
    forward(cache, max(lengths), tag=1)
    cache.commit_prefix(torch.tensor(lengths), np.array(lengths))
    return cache


def slots(cache: TreeCache, b: int, layer: int = 0) -> list[int]:
    """Row b's slots as node names (see `block`), after checking that values mirror keys and that every head
    and dim of a slot holds the same number (no head was broadcast over another)."""
    keys, values = cache.layers[layer].keys[b], cache.layers[layer].values[b]  # [H, S, D]
    assert torch.equal(values, -keys)
    assert (keys == keys[:1, :, :1]).all()
    return keys[0, :, 0].long().tolist()


def snapshot(cache: TreeCache) -> tuple:
    return ([(layer.keys.clone(), layer.values.clone()) for layer in cache.layers], cache.length.clone(),
            cache.host_length.copy(), cache.tree_len)


def assert_unchanged(cache: TreeCache, before: tuple) -> None:
    buffers, length, host_length, tree_len = before
    for layer, (keys, values) in zip(cache.layers, buffers):
        assert torch.equal(layer.keys, keys) and torch.equal(layer.values, values)
    assert torch.equal(cache.length, length)
    assert cache.host_length.tolist() == host_length.tolist()
    assert cache.tree_len == tree_len


# ------------------------------------------------------------------------------------------------ construction
def test_construction_allocates_empty_static_buffers():
    cache = TreeCache(3, 2, H, D, 10, dtype=torch.float16, device="cpu")
    assert len(cache.layers) == len(cache) == 3
    for layer in cache.layers:
        for buf in (layer.keys, layer.values):
            assert buf.shape == (2, H, 10, D) and buf.dtype == torch.float16 and not buf.any()
    assert cache.layers[0].keys.data_ptr() != cache.layers[1].keys.data_ptr()  # one buffer per layer
    assert cache.batch_size == 2 and cache.capacity == 10 and cache.tree_len == 0
    assert cache.device == torch.device("cpu")
    for t in (cache.start, cache.length):
        assert t.dtype == torch.int64 and t.tolist() == [0, 0]
    assert cache.host_length.tolist() == cache.host_start.tolist() == [0, 0]


SIZES = ["num_layers", "batch_size", "num_kv_heads", "head_dim", "capacity"]


@pytest.mark.parametrize("bad", [0, -1, 2.0, "4", None])
@pytest.mark.parametrize("name", SIZES)
def test_construction_rejects_a_bad_size_by_name(name, bad):
    sizes = dict(zip(SIZES, (1, 2, H, D, 8)))
    with pytest.raises(ValueError, match=f"^{name}: expected an int >= 1, got {re.escape(repr(bad))}"):
        TreeCache(**{**sizes, name: bad}, dtype=torch.float32, device="cpu")


def test_construction_accepts_numpy_ints():
    """Sizes are checked as the rest of the package checks integers (`checks.is_int`): NumPy ints pass."""
    cache = TreeCache(np.int64(1), np.int64(2), H, D, np.int64(8), dtype=torch.float32, device="cpu")
    assert cache.batch_size == 2 and cache.capacity == 8 and type(cache.capacity) is int


def test_construction_rejects_bools():
    with pytest.raises(ValueError, match="num_layers"):
        TreeCache(True, 2, H, D, 8, dtype=torch.float32, device="cpu")


# ----------------------------------------------------------------------------------------------------- writes
@pytest.mark.parametrize("lengths", [[4, 4], [3, 6], [0, 5, 2]],
                         ids=["equal-slice", "ragged-scatter", "ragged-empty-row"])
def test_update_writes_after_the_committed_slots_and_the_region(lengths):
    """Two forwards (T = 2, then 3) land at length + tree_len in every row and layer; nothing else changes."""
    cache = committed(lengths, num_layers=2)
    forward(cache, 2, tag=2)
    assert cache.tree_len == 2
    forward(cache, 3, tag=3)
    assert cache.tree_len == 5 and cache.host_length.tolist() == lengths == cache.length.tolist()
    for layer in (0, 1):
        for b, n in enumerate(lengths):
            row = 10 * b
            assert slots(cache, b, layer) == ([100 + row + j for j in range(n)] + [200 + row, 201 + row]
                                              + [300 + row + j for j in range(3)] + [0] * (16 - n - 5))
    # the case exercises the write path its name says (one slice copy for equal rows, else a scatter)
    assert isinstance(cache._write_slots(1), slice) == (len(set(lengths)) == 1)


def test_update_returns_the_whole_buffers():
    cache = new_cache(capacity=6)
    cache.reserve(2)
    keys, values = cache.update(block(2, 2, 1), -block(2, 2, 1), 0)
    assert keys is cache.layers[0].keys and values is cache.layers[0].values
    assert keys.shape == (2, H, 6, D)


@pytest.mark.parametrize("shape", [(2, 1, 3, D), (2, H, 3, 1), (1, H, 3, D), (2, H + 1, 3, D)],
                         ids=["one-head", "one-dim", "one-row", "extra-head"])
@pytest.mark.parametrize("lengths", [[2, 2], [2, 4]], ids=["slice", "scatter"])
def test_update_refuses_a_shape_the_cache_was_not_sized_for(shape, lengths):
    """A key block of the wrong heads, dim or batch is an error, even where a slice copy would broadcast it."""
    cache = committed(lengths)
    before = snapshot(cache)
    cache.reserve(3)
    with pytest.raises(ValueError, match=r"^key_states: \[.*from layer 0, the cache holds \[2, 2, S, 4\]"):
        cache.update(torch.ones(shape), torch.ones(shape), 0)
    assert_unchanged(cache, before)


def test_reserve_refuses_a_tree_that_does_not_fit_before_anything_is_written():
    """The longest row decides: 6 committed + 3 in the region + 3 new fill a 12-slot row exactly; 4 do not."""
    cache = committed([2, 6], capacity=12)
    forward(cache, 3, tag=2)
    before = snapshot(cache)
    with pytest.raises(ValueError, match="^tree: 4 nodes do not fit in the cache: a row would need 13 slots, "
                                         "capacity is 12$"):
        cache.reserve(4)
    assert_unchanged(cache, before)
    forward(cache, 3, tag=3)  # the exact fit: row 1's last slot is the last node's
    assert slots(cache, 1)[-4:] == [212, 310, 311, 312]
    assert slots(cache, 0)[:8] == [100, 101, 200, 201, 202, 300, 301, 302]


def test_rollback_drops_the_region_and_keeps_the_committed_slots():
    cache = committed([3, 5])
    forward(cache, 4, tag=2)
    cache.rollback()
    assert cache.tree_len == 0 and cache.length.tolist() == cache.host_length.tolist() == [3, 5]
    forward(cache, 2, tag=3)  # the next forward reuses the dropped region's slots
    assert slots(cache, 0)[:7] == [100, 101, 102, 300, 301, 202, 203]
    assert slots(cache, 1)[:9] == [110, 111, 112, 113, 114, 310, 311, 212, 213]
    assert cache.tree_len == 2


# ---------------------------------------------------------------------------------------------------- commits
@pytest.mark.parametrize("with_host_index", [False, True])
def test_commit_moves_a_kept_path_to_the_committed_slots(with_host_index):
    """Row 0 keeps root -> node 2, row 1 root -> 1 -> 3: their K/V move to [length, length + count) in every
    layer, lengths advance on device and host, the region is cleared and the next forward follows them."""
    cache = committed([3, 5], num_layers=2)
    cache.start.copy_(torch.tensor([1, 0]))
    forward(cache, 4, tag=2)
    index, count = torch.tensor([[0, 2, -1], [0, 1, 3]]), torch.tensor([2, 3])
    cache.commit(index, count, count.numpy(), index.numpy() if with_host_index else None)
    assert cache.length.tolist() == cache.host_length.tolist() == [5, 8]
    assert cache.tree_len == 0
    assert cache.positions().tolist() == [4, 8]
    for layer in (0, 1):
        assert slots(cache, 0, layer)[:5] == [100, 101, 102, 200, 202]
        assert slots(cache, 1, layer)[:8] == [110, 111, 112, 113, 114, 210, 211, 213]
    forward(cache, 1, tag=3)
    assert slots(cache, 0)[5] == 300 and slots(cache, 1)[8] == 310


def test_commit_moves_each_layers_own_keys_and_values():
    """The layers' buffers are views of one tensor and a commit moves all of them in one gather: each layer
    keeps its own nodes (layer i's keys written as 1000 * i + the node's name), keys and values apart."""
    cache = committed([3, 5], num_layers=3)
    assert all(layer.keys.data_ptr() != other.keys.data_ptr() for layer, other in zip(cache.layers, cache.layers[1:]))
    cache.reserve(4)
    keys = block(2, 4, tag=2)
    for i in range(3):
        cache.update(keys + 1000 * i, -(keys + 1000 * i) - 0.5, i)
    cache.advance(4)
    index, count = torch.tensor([[0, 2, 3], [0, 1, -1]]), torch.tensor([3, 2])
    cache.commit(index, count, count.numpy())
    for i, layer in enumerate(cache.layers):
        assert layer.keys[0, 0, 3:6, 0].tolist() == [1000 * i + 200, 1000 * i + 202, 1000 * i + 203]
        assert layer.keys[1, 1, 5:7, 3].tolist() == [1000 * i + 210, 1000 * i + 211]
        assert layer.values[0, 1, 3:6, 2].tolist() == [-1000 * i - 200.5, -1000 * i - 202.5, -1000 * i - 203.5]
        assert layer.keys[0, 0, :3, 0].tolist() == [100, 101, 102]  # the committed prefix is untouched


def test_commit_of_kept_prefixes_moves_nothing():
    """With the host index, rows that keep a prefix of their region (a chain) commit without any copy: the
    buffers are bit-identical, padding columns included."""
    cache = committed([3, 5])
    forward(cache, 3, tag=2)
    buffers = [(layer.keys.clone(), layer.values.clone()) for layer in cache.layers]
    index, count = torch.tensor([[0, 1, -1], [0, 1, 2]]), torch.tensor([2, 3])
    cache.commit(index, count, count.numpy(), index.numpy())
    assert torch.equal(cache.layers[0].keys, buffers[0][0]) and torch.equal(cache.layers[0].values, buffers[0][1])
    assert cache.length.tolist() == cache.host_length.tolist() == [5, 8] and cache.tree_len == 0


def test_commit_refuses_more_columns_than_the_region_holds():
    cache = committed([3, 5])
    forward(cache, 2, tag=2)
    before = snapshot(cache)
    index = torch.tensor([[0, 1, -1], [0, 1, -1]])
    with pytest.raises(ValueError, match="^node_index: 3 columns but the tree region holds 2 nodes"):
        cache.commit(index, torch.tensor([2, 2]), np.array([2, 2]))
    assert_unchanged(cache, before)


def test_commit_prefix_keeps_ragged_counts_in_place():
    cache = committed([2, 2])
    forward(cache, 3, tag=2)
    before = snapshot(cache)[0]
    cache.commit_prefix(torch.tensor([1, 3]), np.array([1, 3]))
    assert torch.equal(cache.layers[0].keys, before[0][0])
    assert cache.length.tolist() == cache.host_length.tolist() == [3, 5] and cache.tree_len == 0
    forward(cache, 2, tag=3)  # now ragged: row 0 overwrites its dropped nodes
    assert slots(cache, 0)[:6] == [100, 101, 200, 300, 301, 0]
    assert slots(cache, 1)[:8] == [110, 111, 210, 211, 212, 310, 311, 0]


def test_absorb_prefix_commits_a_prompt_block_forwarded_with_the_first_tree():
    """A 3-token prompt block and a 2-node tree in one forward: the block is committed where it lies and the
    tree stays the region, its node i at block column 3 + i."""
    cache = new_cache()
    forward(cache, 5, tag=2)
    cache.absorb_prefix(3)
    assert cache.length.tolist() == cache.host_length.tolist() == [3, 3] and cache.tree_len == 2
    index = torch.tensor([[0, 1], [0, -1]])
    cache.commit(index, torch.tensor([2, 1]), np.array([2, 1]))
    assert cache.length.tolist() == cache.host_length.tolist() == [5, 4]
    assert slots(cache, 0)[:5] == [200, 201, 202, 203, 204]
    assert slots(cache, 1)[:4] == [210, 211, 212, 213]


@pytest.mark.parametrize("count", [-1, 3])
def test_absorb_prefix_refuses_a_count_outside_the_region(count):
    cache = new_cache()
    forward(cache, 2, tag=2)
    before = snapshot(cache)
    with pytest.raises(ValueError, match=rf"^count: {count} outside the tree region's 0..2 nodes"):
        cache.absorb_prefix(count)
    assert_unchanged(cache, before)


def test_positions_are_length_minus_left_padding():
    """The next token's RoPE position: committed tokens, left padding excluded ([B] int64)."""
    cache = new_cache(capacity=12)
    cache.start.copy_(torch.tensor([2, 0]))
    cache.host_start = np.array([2, 0])
    forward(cache, 5, tag=1)
    cache.absorb_prefix(5)
    assert cache.positions().tolist() == [3, 5] and cache.positions().dtype == torch.int64
    forward(cache, 3, tag=2)
    cache.commit(torch.tensor([[0, 2], [0, -1]]), torch.tensor([2, 1]), np.array([2, 1]))
    assert cache.positions().tolist() == [5, 6]


# --------------------------------------------------------------------------------------- the HF Cache interface
@pytest.mark.hf
def test_masks_transformers_builds_stay_query_sized():
    """Tree forwards ignore the model's own mask (the hook reads the tree metadata), so however many slots are
    committed or in flight, transformers is told to build the smallest one: T queries against themselves.
    The layers are written only through TreeCache.update."""
    cache = committed([5, 7], num_layers=2)
    forward(cache, 3, tag=2)
    assert cache.get_seq_length() == 0
    for i in range(2):
        assert cache.get_mask_sizes(4, i) == (4, 0)
        assert cache.layers[i].get_max_length() == 16
        with pytest.raises(RuntimeError, match="TreeCache.update"):
            cache.layers[i].update(block(2, 1, 9), block(2, 1, 9))


MODELS = [("llama", {}), ("qwen2", {}), ("qwen3", {}), ("qwen3", {"head_dim": 24}), ("mistral", {})]


@pytest.mark.hf
@pytest.mark.parametrize("arch, overrides", MODELS, ids=["llama", "qwen2", "qwen3", "qwen3-head_dim-24", "mistral"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_for_model_sizes_the_buffers_the_models_attention_writes(arch, overrides, dtype):
    """`for_model` has one [B, Hkv, capacity, D] buffer pair per layer, shaped like the K/V the model puts in its
    own DynamicCache (an explicit head_dim, one K/V head included), in the model's dtype; `slot_bytes` is what
    one row's slot of it takes."""
    model = make_model(arch, **overrides).to(dtype)
    own = model(torch.tensor([[5, 6, 7]]), use_cache=True).past_key_values
    cache = TreeCache.for_model(model, 3, 10)
    assert len(cache.layers) == len(own.layers) == 2
    for mine, theirs in zip(cache.layers, own.layers):
        _, kv_heads, _, head_dim = theirs.keys.shape
        for buf in (mine.keys, mine.values):
            assert buf.shape == (3, kv_heads, 10, head_dim) and buf.dtype == dtype
    total = sum(buf.numel() * buf.element_size() for layer in cache.layers for buf in (layer.keys, layer.values))
    assert TreeCache.slot_bytes(model) == total // (3 * 10)


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
