"""The tree KV cache: static per-layer buffers with per-row prefix bounds, usable by unmodified HF models.

Every layer's buffers [B, Hkv, capacity, D] are views of one tensor ``kv`` [num_layers, 2, B, Hkv, capacity, D]
(keys, values). Layout of row b in each::

    [0, start[b])                       left padding, never read
    [start[b], length[b])               committed tokens (length - start of them: the root's RoPE position)
    [length[b], length[b] + tree_len)   tree region: K/V of the nodes forwarded since the last commit
    [length[b] + tree_len, capacity)    free

A forward over T nodes writes their K/V at ``length[b] + tree_len + [0, T)`` (`update`, called by the
model's attention layers) and `advance(T)` then grows the region. `commit` moves the kept nodes of the
region to ``[length[b], length[b] + count[b])`` and advances `length`; `rollback` drops the region.
Buffers never reallocate, so the step's shapes stay static.

``host_length`` mirrors ``length`` on the host exactly (commits take the host counts the verifier brings
back with the step's one sync), and ``host_start`` mirrors ``start`` (set by the prefill), so capacity
checks and the attention plan never touch the device. When every row has the same length (plain
decoding, unpadded batches) a forward writes its K/V with one slice copy per layer instead of a scatter.
"""

from __future__ import annotations

import os

import numpy as np
import torch
from torch import Tensor
from transformers import Cache, PreTrainedModel
from transformers.cache_utils import CacheLayerMixin

from .checks import as_int
from .parallel import attention_heads

__all__ = ["TreeCache", "free_memory"]


class _TreeCacheLayer(CacheLayerMixin):
    """One layer's static K/V buffers; the writing is done by `TreeCache.update` (it knows the offsets)."""

    is_compileable = False
    is_sliding = False

    def __init__(self, keys: Tensor, values: Tensor):
        super().__init__()
        self.keys, self.values = keys, values
        self.is_initialized = True

    def lazy_initialization(self, key_states: Tensor, value_states: Tensor) -> None:
        """Buffers are allocated up front; nothing to do."""

    def update(self, key_states: Tensor, value_states: Tensor, *args, **kwargs) -> tuple[Tensor, Tensor]:
        raise RuntimeError("TreeCache layers are written through TreeCache.update")

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        # Tree forwards ignore the model's own mask (the hook reads the tree metadata instead), so make the
        # mask transformers builds for them the smallest one: queries against themselves.
        return query_length, 0

    def get_seq_length(self) -> int:
        return 0

    def get_max_length(self) -> int:
        return self.keys.shape[2]


class TreeCache(Cache):
    """Per-row KV cache for tree forwards (target, draft and scorer models alike).

    start:  [B] int64, first valid slot of each row (its left padding).
    length: [B] int64, committed slots; ``length - start`` tokens are in the cache.
    """

    def __init__(
        self,
        num_layers: int,
        batch_size: int,
        num_kv_heads: int,
        head_dim: int,
        capacity: int,
        *,
        dtype: torch.dtype,
        device: torch.device | str,
    ):
        num_layers, batch_size, num_kv_heads, head_dim, capacity = (as_int(value, name, 1) for value, name in (
            (num_layers, "num_layers"), (batch_size, "batch_size"), (num_kv_heads, "num_kv_heads"),
            (head_dim, "head_dim"), (capacity, "capacity")))
        # One buffer holds every layer's keys and values, [num_layers, 2, B, Hkv, capacity, D]; the layers'
        # buffers are views of it, so a commit moves the kept nodes of all layers in one gather and one scatter.
        # A pair per layer and buffer cost the demo target's tree steps 0.36 ms at batch 4 in the loop on the
        # 2-core CPU (4% of their verification); alone, 190 -> 124 us at batch 4, 520 -> 223 at batch 16
        # (bench/results/2026-12-07-cpu-kv-commit/)
        self.kv = torch.zeros((num_layers, 2, batch_size, num_kv_heads, capacity, head_dim), dtype=dtype,
                              device=device)
        super().__init__(layers=[_TreeCacheLayer(self.kv[i, 0], self.kv[i, 1]) for i in range(num_layers)])
        self.capacity = capacity
        self.start = torch.zeros(batch_size, dtype=torch.int64, device=device)  # [B]
        self.length = torch.zeros(batch_size, dtype=torch.int64, device=device)  # [B]
        self.host_length = np.zeros(batch_size, dtype=np.int64)  # [B], mirrors length
        self.host_start = np.zeros(batch_size, dtype=np.int64)  # [B], mirrors start
        self.tree_len = 0
        self._write: tuple[int, slice | Tensor] | None = None  # (T, where) of the forward in flight

    @classmethod
    def for_model(cls, model: PreTrainedModel, batch_size: int, capacity: int) -> "TreeCache":
        """Buffers for what the model's attention layers receive, in the model's dtype and on its device:
        the config's key/value heads, or under tensor parallelism this rank's shard of them."""
        _, kv_heads, head_dim = attention_heads(model)
        return cls(model.config.get_text_config().num_hidden_layers, batch_size, kv_heads, head_dim, capacity,
                   dtype=model.dtype, device=model.device)

    @staticmethod
    def slot_bytes(model: PreTrainedModel) -> int:
        """Bytes one slot of one row takes in the cache `for_model` allocates (keys and values, every layer)."""
        _, kv_heads, head_dim = attention_heads(model)
        layers = model.config.get_text_config().num_hidden_layers
        return 2 * layers * kv_heads * head_dim * model.dtype.itemsize

    @property
    def batch_size(self) -> int:
        return self.start.shape[0]

    @property
    def device(self) -> torch.device:
        return self.start.device

    # ------------------------------------------------------------------ writing (called by the model)
    def update(self, key_states: Tensor, value_states: Tensor, layer_idx: int, *args, **kwargs) -> tuple[Tensor, Tensor]:
        """Write [B, Hkv, T, D] new K/V at ``length + tree_len + [0, T)`` and return the whole buffers."""
        layer = self.layers[layer_idx]
        B, H, T, D = key_states.shape
        if (B, H, D) != (layer.keys.shape[0], layer.keys.shape[1], layer.keys.shape[3]):
            # a slice write would broadcast one head over several: a wrong answer, not an error
            raise ValueError(f"key_states: [{B}, {H}, T, {D}] from layer {layer_idx}, the cache holds "
                             f"[{layer.keys.shape[0]}, {layer.keys.shape[1]}, S, {layer.keys.shape[3]}] (a model "
                             "sharded or configured differently from the one the cache was sized for)")
        where = self._write_slots(T)
        if isinstance(where, slice):
            layer.keys[:, :, where] = key_states
            layer.values[:, :, where] = value_states
        else:
            index = where[:, None, :, None].expand(B, H, T, D)
            layer.keys.scatter_(2, index, key_states.to(layer.keys.dtype))
            layer.values.scatter_(2, index, value_states.to(layer.values.dtype))
        return layer.keys, layer.values

    def _write_slots(self, T: int) -> slice | Tensor:
        """Where this forward's T nodes go, worked out once for all layers: a slice when every row has
        the same length (known on the host), else the slots [B, T] int64 of each row."""
        if self._write is None or self._write[0] != T:
            first = int(self.host_length[0]) + self.tree_len
            if (self.host_length == self.host_length[0]).all():
                where: slice | Tensor = slice(first, first + T)
            else:
                where = (self.length + self.tree_len)[:, None] + torch.arange(T, device=self.device)
            self._write = (T, where)
        return self._write[1]

    # ------------------------------------------------------------------ bookkeeping (called by specdec)
    def reserve(self, num_new: int) -> None:
        """Raise ValueError, before anything is written, if `num_new` more slots do not fit in every row."""
        self._write = None
        need = int(self.host_length.max()) + self.tree_len + num_new
        if need > self.capacity:
            raise ValueError(f"tree: {num_new} nodes do not fit in the cache: a row would need {need} slots, "
                             f"capacity is {self.capacity}")

    def advance(self, num_new: int) -> None:
        """Grow the tree region by the `num_new` nodes a forward just wrote."""
        self.tree_len += num_new
        self._write = None

    def rollback(self) -> None:
        """Drop the tree region (its slots become free)."""
        self.tree_len = 0
        self._write = None

    def commit(self, node_index: Tensor, count: Tensor, host_count: np.ndarray,
               host_node_index: np.ndarray | None = None) -> None:
        """Keep nodes of the tree region and drop the rest.

        node_index: [B, W] int64, tree-region index of each kept node in order (root first), -1 padding.
        count:      [B] int64, kept nodes per row (<= W); host_count: the same numbers on the host.
        host_node_index: node_index on the host, when the caller has it: if every row keeps a prefix of
        its region (a root-only tree, an accepted chain), nothing moves.
        Kept nodes must be increasing within a row (a root-to-node path is), so a gather-then-scatter
        never overwrites a node before it is read.
        """
        B, W = node_index.shape
        if W > self.tree_len:
            raise ValueError(f"node_index: {W} columns but the tree region holds {self.tree_len} nodes")
        if host_node_index is not None:
            cols = np.arange(W)[None, :]
            kept = cols < np.asarray(host_count)[:, None]
            if (host_node_index[kept] == np.broadcast_to(cols, (B, W))[kept]).all():
                self.commit_prefix(count, host_count)
                return
        src = self.length[:, None] + node_index.clamp(min=0)  # [B, W]
        dst = self.length[:, None] + torch.arange(W, device=self.device)  # [B, W]
        n, _, _, H, _, D = self.kv.shape
        shape = (n, 2, B, H, W, D)
        moved = self.kv.gather(4, src[None, None, :, None, :, None].expand(shape))
        self.kv.scatter_(4, dst[None, None, :, None, :, None].expand(shape), moved)
        self.commit_prefix(count, host_count)

    def absorb_prefix(self, count: int) -> None:
        """The first `count` nodes of every row's tree region join the committed prefix where they are
        (a prompt block forwarded together with the first tree); the nodes after them stay the region."""
        if not 0 <= count <= self.tree_len:
            raise ValueError(f"count: {count} outside the tree region's 0..{self.tree_len} nodes")
        self.length += count
        self.host_length += count
        self.tree_len -= count
        self._write = None

    def commit_prefix(self, count: Tensor, host_count: np.ndarray) -> None:
        """Keep the first `count[b]` nodes of each row's tree region where they are (a chain)."""
        self.length += count
        self.host_length += np.asarray(host_count, dtype=np.int64)
        self.tree_len = 0
        self._write = None

    def positions(self) -> Tensor:
        """[B] int64: RoPE position of the next token of each row, ``length - start``."""
        return self.length - self.start


def free_memory(device: torch.device) -> int | None:
    """Bytes that can still be allocated on `device`: the GPU's free memory, or the host's available memory
    (Linux's MemAvailable); None when unknown (then no memory check is made)."""
    if device.type == "cuda":
        return int(torch.cuda.mem_get_info(device)[0])
    if device.type != "cpu":
        return None
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass  # not Linux: sysconf below, or unknown
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None
