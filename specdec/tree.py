"""Candidate trees: the `TreeBatch` every stage passes along, and its derivations.

A row's tree lists its nodes in topological order: node 0 is the root (the last committed token, whose
K/V is not in the caches yet), ``parents[b, 0] == -1`` and ``0 <= parents[b, i] < i`` for every other
real node. Nodes at ``i >= num_nodes[b]`` are padding: their token and parent are ignored, they attend
only to themselves and are never accepted.

Worked example, one row, root token 7 with two children (3, 5) and a grandchild 9 under 3::

    tokens  = [7, 3, 5, 9]          depth     = [0, 1, 1, 2]
    parents = [-1, 0, 0, 1]         ancestors = [0b0001, 0b0011, 0b0101, 0b1011]   (bit m: node m)
    leaves  = [F, F, T, T]          paths     = [[0, 2, -1], [0, 1, 3]]   (by leaf index)

Derivations are vectorised (pointer jumping, no Python loop over nodes) and cached on the frozen instance:
depth and ancestors in one Triton launch on CUDA, in numpy on the CPU, the rest in torch on the tree's device.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from functools import cached_property
from typing import Sequence

import torch
from torch import Tensor

from .ops.bits import as_int32, pack_bits, unpack_bits
from .ops.tree_metadata import ancestor_mask_ref, depth_ref, detached_parents, tree_metadata, tree_metadata_host

__all__ = ["TreeBatch", "pack_bits", "unpack_bits", "prefill_mask", "prompt_tree_mask"]


def prefill_mask(start: Tensor, num_tokens: int) -> Tensor:
    """Ancestor bitmask [B, T, W] int32 of a left-padded prompt seen as a chain.

    Column i of row b attends to columns ``start[b] .. i``; left-padding columns (``i < start[b]``) attend
    only to themselves, like padding nodes. Built word by word, never as a dense [T, T] mask.
    """
    words = max(1, math.ceil(num_tokens / 32))
    device = start.device
    col = torch.arange(num_tokens, device=device, dtype=torch.int64)[None, :, None]  # [1, T, 1]
    base = 32 * torch.arange(words, device=device, dtype=torch.int64)[None, None, :]  # [1, 1, W]
    lo = (start.to(torch.int64)[:, None, None] - base).clamp(0, 32)  # first set bit in the word
    hi = (col + 1 - base).clamp(0, 32)  # one past the last set bit
    hi = torch.maximum(hi, lo)
    span = ((1 << hi) - 1) ^ ((1 << lo) - 1)  # bits lo .. hi-1; int64 holds 1 << 32
    own = (col - base >= 0) & (col - base < 32)
    self_bit = torch.where(own, 1 << (col - base).clamp(0, 31), 0)
    return as_int32(span | self_bit)


def prompt_tree_mask(start: Tensor, num_prompt: int, tree_mask: Tensor) -> Tensor:
    """Ancestor bitmask [B, P + T, W] of a left-padded prompt block (P columns) followed by a tree (T
    nodes, its own mask [B, T, >= ceil(T/32)]) forwarded as one region, W = ceil((P + T) / 32).

    Prompt columns are as in `prefill_mask`; tree node i sees the row's real prompt columns
    ``[start[b], P)`` and the region slots ``P + m`` of itself and its ancestors. Example, P = 2 with
    start 1 and a root with one child: rows [0b0001, 0b0010, 0b0110, 0b1110].
    """
    B, T = tree_mask.shape[:2]
    N = num_prompt + T
    prompt_rows = prefill_mask(start, N)[:, :num_prompt]  # [B, P, W]
    cols = torch.arange(num_prompt, device=start.device)
    seen = (cols[None, :] >= start.to(torch.int64)[:, None])  # [B, P]: the real prompt columns
    tree_bits = torch.cat([seen[:, None, :].expand(B, T, num_prompt), unpack_bits(tree_mask, T)], 2)  # [B, T, N]
    return torch.cat([prompt_rows, pack_bits(tree_bits)], 1)


@functools.lru_cache(maxsize=64)
def _chain_masks(T: int, device: torch.device) -> tuple[Tensor, Tensor]:
    """Ancestor masks [T, W] int32 of a T-node chain (node i: bits 0..i) and of T padding nodes (bit i
    alone), made once per size and device: chains are built every decoding step."""
    full = prefill_mask(torch.zeros(1, dtype=torch.int64, device=device), T)[0]
    own = prefill_mask(torch.full((1,), T, dtype=torch.int64, device=device), T)[0]
    return full, own


@dataclass(frozen=True)
class TreeBatch:
    """One candidate tree per batch row.

    tokens:    [B, T] int64, node 0 is the root; padding nodes may hold any value.
    parents:   [B, T] int64, -1 for the root, ``parents[b, i] < i``; ignored for padding nodes.
    num_nodes: [B] int64, real nodes per row (1 <= num_nodes[b] <= T); the rest is padding.
    logp:      [B, T] float32 or None, the supplier's log-prob of tokens[i] given its path (root: 0).
    max_depth: host-side upper bound on every row's depth when the builder knows it (saves a device
               sync when sizing an acceptance); None means "derive it from parents".
    draft_probs: [B, T, V] float or None. Set only by suppliers that *sample* their candidates: row i is
               the draft distribution q from which node i's children were drawn one after another without
               replacement, in node order (leaves: any values). Sampled verification then uses the
               recursive rule with q; None (every deterministic candidate set, and any tree a filter or
               other selection rebuilt) means the rule for deterministic trees (`specdec.sampling`).
               Greedy verification ignores it.
    """

    tokens: Tensor  # [B, T] int64
    parents: Tensor  # [B, T] int64
    num_nodes: Tensor  # [B] int64
    logp: Tensor | None = None  # [B, T] float32
    max_depth: int | None = None
    draft_probs: Tensor | None = None  # [B, T, V] float

    # ------------------------------------------------------------------ constructors
    @classmethod
    def from_parents(
        cls,
        tokens: Tensor | Sequence[Sequence[int]],
        parents: Tensor | Sequence[Sequence[int]],
        num_nodes: Tensor | Sequence[int] | None = None,
        *,
        logp: Tensor | None = None,
        vocab_size: int | None = None,
        validate: bool = True,
        device: torch.device | str | None = None,
    ) -> "TreeBatch":
        """Build from parent pointers. `num_nodes` defaults to T for every row."""
        tokens = torch.as_tensor(tokens, dtype=torch.int64, device=device)
        parents = torch.as_tensor(parents, dtype=torch.int64, device=tokens.device)
        if num_nodes is None:
            num_nodes = torch.full((tokens.shape[0],), tokens.shape[-1] if tokens.ndim == 2 else 0)
        num_nodes = torch.as_tensor(num_nodes, dtype=torch.int64, device=tokens.device)
        tree = cls(tokens, parents, num_nodes, logp)
        tree.check_shapes()
        if validate:
            tree.validate(vocab_size)
        return tree

    @classmethod
    def from_paths(
        cls,
        roots: Tensor | Sequence[int],
        paths: Sequence[Sequence[Sequence[int]]],
        *,
        vocab_size: int | None = None,
        device: torch.device | str | None = None,
    ) -> "TreeBatch":
        """Merge each row's token paths (continuations after its root) into a trie.

        ``paths[b]`` is a list of token lists; shared prefixes become shared nodes. Nodes are numbered
        breadth first (by depth, then by first appearance), so the result is in topological order.
        Built on the host: this constructor is for suppliers whose candidates come from host data.
        """
        roots = [int(r) for r in torch.as_tensor(roots).reshape(-1).tolist()]
        if len(roots) != len(paths):
            raise ValueError(f"paths: {len(paths)} rows of paths for {len(roots)} roots")
        rows_tokens, rows_parents = [], []
        for root, row_paths in zip(roots, paths):
            nodes: dict[tuple[int, ...], int] = {(): 0}
            tokens, parents = [root], [-1]
            depth = max((len(p) for p in row_paths), default=0)
            for d in range(1, depth + 1):
                for path in row_paths:
                    if len(path) >= d and tuple(path[:d]) not in nodes:
                        nodes[tuple(path[:d])] = len(tokens)
                        tokens.append(int(path[d - 1]))
                        parents.append(nodes[tuple(path[: d - 1])])
            rows_tokens.append(tokens)
            rows_parents.append(parents)
        width = max(len(t) for t in rows_tokens)
        pad = lambda rows, fill: [r + [fill] * (width - len(r)) for r in rows]  # noqa: E731
        depth_bound = max((len(p) for row in paths for p in row), default=0)
        tree = cls(
            torch.tensor(pad(rows_tokens, 0), dtype=torch.int64, device=device),
            torch.tensor(pad(rows_parents, -1), dtype=torch.int64, device=device),
            torch.tensor([len(t) for t in rows_tokens], dtype=torch.int64, device=device),
            max_depth=depth_bound,
        )
        tree.validate(vocab_size)
        return tree

    @classmethod
    def from_ancestor_mask(
        cls,
        tokens: Tensor,
        tree_mask: Tensor,
        num_nodes: Tensor | Sequence[int] | None = None,
        *,
        vocab_size: int | None = None,
        validate: bool = True,
    ) -> "TreeBatch":
        """Build from EAGLE/Medusa-style buffers: ``tree_mask[i, j]`` nonzero iff j is i or an ancestor of i.

        tokens: [B, T] int64. tree_mask: [T, T], [B, T, T] or [B, 1, T, T] (bool, int or float ones).
        A node's parent is its deepest proper ancestor, i.e. the one with the largest index.
        """
        tokens = torch.as_tensor(tokens, dtype=torch.int64)
        mask = torch.as_tensor(tree_mask, device=tokens.device)
        if mask.ndim == 4 and mask.shape[1] == 1:
            mask = mask[:, 0]
        if mask.ndim == 2:
            mask = mask.expand(tokens.shape[0], *mask.shape)
        if mask.ndim != 3 or mask.shape[0] != tokens.shape[0] or mask.shape[1:] != (tokens.shape[1],) * 2:
            raise ValueError(f"tree_mask: expected [T, T] or [B, T, T] with B, T = {tuple(tokens.shape)}, "
                             f"got {tuple(tree_mask.shape)}")
        mask = mask != 0
        T = tokens.shape[1]
        idx = torch.arange(T, device=tokens.device)
        proper = mask & (idx[None, None, :] < idx[None, :, None])  # ancestors before the node
        parents = torch.where(proper.any(-1), (proper * (idx + 1)).amax(-1) - 1, -1)
        if validate and num_nodes is not None:
            real = idx[None, :] < torch.as_tensor(num_nodes, device=tokens.device)[:, None]
        else:
            real = torch.ones_like(parents, dtype=torch.bool)
        orphan = (parents < 0) & (idx > 0) & real
        if validate and bool(orphan.any()):
            b, i = (int(x) for x in orphan.nonzero()[0])
            raise ValueError(f"tree_mask: row {b} node {i} lists no ancestor; every node but the root descends from it")
        tree = cls.from_parents(tokens, parents, num_nodes, vocab_size=vocab_size, validate=validate)
        if validate:
            given = mask & tree.valid[:, :, None] & tree.valid[:, None, :]
            derived = unpack_bits(tree.ancestor_mask, T) & tree.valid[:, :, None]
            bad = (given != derived).any(-1)
            if bool(bad.any()):
                b, i = (int(x) for x in bad.nonzero()[0])
                raise ValueError(f"tree_mask: row {b} node {i} does not list exactly itself and its ancestors "
                                 "(upper-triangular entries or a skipped ancestor)")
        return tree

    @classmethod
    def chain(cls, tokens: Tensor, num_nodes: Tensor, *, logp: Tensor | None = None,
              draft_probs: Tensor | None = None) -> "TreeBatch":
        """Each row's first `num_nodes[b]` nodes form one chain (root, its child, its grandchild, ...),
        the rest is padding: a draft's catch-up, a draft chain. tokens: [B, T] int64; num_nodes: [B] int64.

        The depth and ancestor mask of a chain are written down directly (a handful of ops, no pointer
        jumping). Example, T = 3, num_nodes [3, 2]: depth [[0, 1, 2], [0, 1, 0]], masks
        [[0b001, 0b011, 0b111], [0b001, 0b011, 0b100]] (row 1's node 2 is padding: itself only).
        """
        B, T = tokens.shape
        idx = torch.arange(T, device=tokens.device)
        tree = cls(tokens, (idx - 1).expand(B, T).contiguous(), num_nodes, logp, max_depth=T - 1,
                   draft_probs=draft_probs)
        valid = idx[None, :] < num_nodes[:, None]  # [B, T]
        chain_bits, own_bits = _chain_masks(T, tokens.device)  # [T, W] each
        # cached_property reads the instance dict first: seeding it skips the general derivations.
        object.__setattr__(tree, "valid", valid)
        object.__setattr__(tree, "depth", torch.where(valid, idx, 0))
        object.__setattr__(tree, "ancestor_mask", torch.where(valid[:, :, None], chain_bits, own_bits))
        return tree

    # ------------------------------------------------------------------ validation
    @property
    def batch_size(self) -> int:
        return self.tokens.shape[0]

    @property
    def size(self) -> int:
        """T: node slots per row, padding included."""
        return self.tokens.shape[1]

    @property
    def device(self) -> torch.device:
        return self.tokens.device

    def check_shapes(self) -> None:
        """Cheap checks that need no data: ranks, dtypes, devices, matching sizes."""
        if self.tokens.ndim != 2 or self.tokens.shape[1] < 1:
            raise ValueError(f"tokens: expected [B, T] with T >= 1, got {tuple(self.tokens.shape)}")
        for name in ("tokens", "parents", "num_nodes"):
            t = getattr(self, name)
            if t.dtype != torch.int64:
                raise TypeError(f"{name}: expected int64, got {t.dtype}")
            if t.device != self.tokens.device:
                raise ValueError(f"{name}: on {t.device}, tokens on {self.tokens.device}")
        if self.parents.shape != self.tokens.shape:
            raise ValueError(f"parents: shape {tuple(self.parents.shape)} != tokens {tuple(self.tokens.shape)}")
        if self.num_nodes.shape != (self.batch_size,):
            raise ValueError(f"num_nodes: expected [{self.batch_size}], got {tuple(self.num_nodes.shape)}")
        if self.logp is not None and self.logp.shape != self.tokens.shape:
            raise ValueError(f"logp: shape {tuple(self.logp.shape)} != tokens {tuple(self.tokens.shape)}")
        q = self.draft_probs
        if q is not None and (q.ndim != 3 or q.shape[:2] != self.tokens.shape or not q.is_floating_point()
                              or q.device != self.tokens.device):
            raise ValueError(f"draft_probs: expected [B, T, V] float on {self.tokens.device} with B, T = "
                             f"{tuple(self.tokens.shape)}, got {tuple(q.shape)} {q.dtype} on {q.device}")

    def validate(self, vocab_size: int | None = None) -> None:
        """Data checks (one host sync): sizes, topological order, distinct siblings, token range.

        Raises ValueError naming the argument, the row and the node.
        """
        self.check_shapes()
        B, T = self.tokens.shape
        bad_n = (self.num_nodes < 1) | (self.num_nodes > T)
        if bool(bad_n.any()):
            b = int(bad_n.nonzero()[0, 0])
            raise ValueError(f"num_nodes: row {b} has {int(self.num_nodes[b])} nodes, expected 1..{T}")
        idx = torch.arange(T, device=self.device)
        valid = self.valid
        bad_root = self.parents[:, 0] != -1
        if bool(bad_root.any()):
            b = int(bad_root.nonzero()[0, 0])
            raise ValueError(f"parents: row {b} node 0 (the root) must have parent -1, got {int(self.parents[b, 0])}")
        bad = valid & (idx > 0) & ((self.parents < 0) | (self.parents >= idx))
        if bool(bad.any()):
            b, i = (int(x) for x in bad.nonzero()[0])
            raise ValueError(f"parents: row {b} node {i} has parent {int(self.parents[b, i])}; every node's parent "
                             "must come before it (topological order, which also rules out cycles)")
        if vocab_size is not None:
            bad = valid & ((self.tokens < 0) | (self.tokens >= vocab_size))
            if bool(bad.any()):
                b, i = (int(x) for x in bad.nonzero()[0])
                raise ValueError(f"tokens: row {b} node {i} holds id {int(self.tokens[b, i])}, outside the vocabulary "
                                 f"[0, {vocab_size})")
        # Siblings: two real non-root nodes with the same parent and token.
        same = (self.parents[:, :, None] == self.parents[:, None, :]) & (self.tokens[:, :, None] == self.tokens[:, None, :])
        real = valid & (idx > 0)
        dup = same & real[:, :, None] & real[:, None, :] & (idx[None, :, None] > idx[None, None, :])
        if bool(dup.any()):
            b, i, j = (int(x) for x in dup.nonzero()[0])
            raise ValueError(f"tokens: row {b} nodes {j} and {i} are siblings with the same token "
                             f"{int(self.tokens[b, i])}; siblings must carry distinct tokens")

    # ------------------------------------------------------------------ derivations
    @cached_property
    def valid(self) -> Tensor:
        """[B, T] bool: real (non-padding) nodes."""
        return torch.arange(self.size, device=self.device)[None, :] < self.num_nodes[:, None]

    @cached_property
    def _parents(self) -> Tensor:
        """Parent pointers with padding nodes (and anything out of range) detached: -1."""
        return detached_parents(self.parents, self.num_nodes)

    @cached_property
    def _kernel_metadata(self) -> tuple[Tensor, Tensor] | None:
        """(depth, ancestor_mask) in one go instead of a few dozen small torch launches: on CUDA from
        `ops.tree_metadata` (one Triton launch when Triton is installed), on the CPU from
        `ops.tree_metadata_host` (numpy); None elsewhere (the torch reference)."""
        if self.device.type == "cpu":
            return tree_metadata_host(self.parents, self.num_nodes)
        if self.device.type != "cuda":
            return None
        return tree_metadata(self.parents, self.num_nodes)

    @cached_property
    def depth(self) -> Tensor:
        """[B, T] int64: edges from the root (0 for the root and padding)."""
        if self.size == 1:  # root-only trees (plain decoding) need no derivation
            return torch.zeros_like(self.tokens)
        if self._kernel_metadata is not None:
            return self._kernel_metadata[0]
        return depth_ref(self._parents)

    @cached_property
    def ancestor_mask(self) -> Tensor:
        """[B, T, W] int32, W = ceil(T/32): bit m of row i set iff m is i or an ancestor of i."""
        if self.size == 1:
            return torch.ones((self.batch_size, 1, 1), dtype=torch.int32, device=self.device)
        if self._kernel_metadata is not None:
            return self._kernel_metadata[1]
        return ancestor_mask_ref(self._parents)

    def path_min(self, values: Tensor) -> Tensor:
        """[B, T]: the least of `values` [B, T] (float) along each node's root path, the node included.

        Example: parents [-1, 0, 1], values [inf, 0.5, 0.9] -> [inf, 0.5, 0.5] (the child never reads above
        its parent). Padding slots read their own value. A rank by it, ties to the lower index, is closed
        under ancestors."""
        on_path = unpack_bits(self.ancestor_mask, self.size)  # [B, node, ancestor-or-self]
        return torch.where(on_path, values[:, None, :], float("inf")).amin(2)

    @cached_property
    def leaves(self) -> Tensor:
        """[B, T] bool: real nodes with no real child."""
        p = self._parents
        child_count = torch.zeros(self.tokens.shape, dtype=torch.int64, device=self.device)
        child_count.scatter_add_(1, p.clamp(min=0), (p >= 0).to(torch.int64))
        return self.valid & (child_count == 0)

    @cached_property
    def depth_bound(self) -> int:
        """Host int >= every row's depth: `max_depth` when given, else derived (one host sync)."""
        if self.max_depth is not None:
            return self.max_depth
        return int(self.depth.max())  # host sync: only for trees built without a known depth

    @cached_property
    def paths(self) -> Tensor:
        """[B, P, depth_bound + 1] int64: node indices of each root-to-leaf path, root first, -1 padded.

        P is the largest leaf count of any row; rows with fewer leaves have all -1 paths at the end.
        """
        B, T = self.tokens.shape
        leaves = self.leaves
        P = int(leaves.sum(1).max())  # host sync: the output's shape
        order = torch.sort((~leaves).to(torch.int8), dim=1, stable=True).indices[:, :P]  # leaves first, by index
        has = torch.gather(leaves, 1, order)
        anc = unpack_bits(self.ancestor_mask, T)  # [B, T, T]
        on_path = torch.gather(anc, 1, order[:, :, None].expand(B, P, T)) & has[:, :, None]  # [B, P, T]
        L = self.depth_bound + 1
        out = torch.full((B, P, L + 1), -1, dtype=torch.int64, device=self.device)
        slot = torch.where(on_path, self.depth[:, None, :].expand(B, P, T), L)  # off-path nodes -> scratch column
        out.scatter_(2, slot, torch.arange(T, device=self.device).expand(B, P, T).contiguous())
        out = out[:, :, :L]
        return torch.where(has[:, :, None], out, -1)

    def positions(self, root_position: Tensor) -> Tensor:
        """[B, T] int64 RoPE positions: ``root_position[b] + depth[b, i]`` (padding nodes: the root's)."""
        return root_position.to(torch.int64)[:, None] + self.depth

    def with_num_nodes(self, num_nodes: Tensor) -> "TreeBatch":
        """The same trees cut to `num_nodes` (each <= the current count); for masking finished rows to the root.
        A row cut to its root keeps no candidate, so `draft_probs` stays valid and is kept."""
        return TreeBatch(self.tokens, self.parents, num_nodes, self.logp, self.max_depth, self.draft_probs)
