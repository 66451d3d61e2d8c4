"""Prompt lookup: candidates copied from earlier occurrences of the context's last n-gram.

For each row, the longest n in [min_ngram, max_ngram] whose last-n-token suffix occurs earlier in the
row's context (prompt and output so far) wins; the `max_matches` most recent occurrences each propose the
`num_pred` tokens that followed them, and the continuations are merged into a trie. Runs on the host
with numpy, vectorised over rows, on the committed tokens the state already holds there (no device
sync), like the n-gram proposers of serving engines.
"""

from __future__ import annotations

import numpy as np
import torch
from numpy.lib.stride_tricks import sliding_window_view
from transformers import PreTrainedModel

from ..checks import as_int
from ..state import DecodeState
from ..tree import TreeBatch
from ..verify import vocab_size
from .base import Supplier, check_within, position_limit
from .trie import prefix_trie

__all__ = ["PromptLookupSupplier"]


class PromptLookupSupplier(Supplier):
    def __init__(self, max_ngram: int = 3, min_ngram: int = 1, num_pred: int = 10, max_matches: int = 4):
        max_ngram, min_ngram, num_pred, max_matches = (as_int(value, name, 1) for name, value in (
            ("max_ngram", max_ngram), ("min_ngram", min_ngram), ("num_pred", num_pred), ("max_matches", max_matches)))
        if min_ngram > max_ngram:
            raise ValueError(f"min_ngram: {min_ngram} exceeds max_ngram {max_ngram}")
        self.max_ngram, self.min_ngram = max_ngram, min_ngram
        self.num_pred, self.max_matches = num_pred, max_matches

    def attach(self, target: PreTrainedModel) -> None:
        """Bounds: a tree no deeper and no larger than the target's positions allow."""
        limit = position_limit(target)
        check_within("num_pred", self.num_pred, None if limit is None else limit - 1,
                     f"the depth the target's {limit} positions allow")
        if limit is not None and self.max_tree_size() > limit:
            raise ValueError(f"max_matches: {self.max_matches} continuations of num_pred {self.num_pred} tokens make "
                             f"trees of up to {self.max_tree_size()} nodes, more than the target's {limit} positions")
        self._vocab = vocab_size(target)

    def max_tree_size(self) -> int:
        return 1 + self.num_pred * self.max_matches

    def memory_bytes(self, batch_size: int, capacity: int) -> dict[str, int]:
        return {"num_pred": batch_size * self.max_tree_size() * self._vocab * 8}  # the target's logits over the tree

    def propose(self, state: DecodeState) -> TreeBatch:
        cont = self._continuations(state.history, state.host_start, state.history_len)  # [B, M, K]
        trie = prefix_trie(cont)
        tok = torch.from_numpy(trie.tokens).to(state.root.device)
        tok[:, 0] = state.root
        return TreeBatch(tok, torch.from_numpy(trie.parents).to(tok.device),
                         torch.from_numpy(trie.num_nodes).to(tok.device),
                         max_depth=self.num_pred)

    def _continuations(self, history: np.ndarray, start: np.ndarray, length: np.ndarray) -> np.ndarray:
        """[B, M, K] int64: up to M = max_matches continuations of K = num_pred tokens per row, -1 padded."""
        B, width = history.shape
        M, K = self.max_matches, self.num_pred
        out = np.full((B, M, K), -1, dtype=np.int64)
        found = np.zeros(B, dtype=bool)
        rows = np.arange(B)
        for n in range(self.max_ngram, self.min_ngram - 1, -1):
            if n >= width:
                continue
            suffix = history[rows[:, None], (length - n)[:, None] + np.arange(n)]  # [B, n]
            windows = sliding_window_view(history, n, axis=1)  # [B, width - n + 1, n]
            pos = np.arange(windows.shape[1])[None, :]
            # an occurrence must lie in the row's context and be followed by at least one token
            hit = (windows == suffix[:, None, :]).all(-1) & (pos >= start[:, None]) & (pos + n < length[:, None])
            hit &= (length - n >= start)[:, None] & ~found[:, None]
            # most recent occurrences first: rank hits from the right
            rank = np.cumsum(hit[:, ::-1], axis=1)[:, ::-1]
            pick = hit & (rank <= M)
            r, p = np.nonzero(pick)
            m = rank[r, p] - 1
            idx = p[:, None] + n + np.arange(K)[None, :]  # [hits, K]
            ok = idx < length[r, None]
            out[r[:, None], m[:, None], np.arange(K)[None, :]] = np.where(ok, history[r[:, None], np.minimum(idx, width - 1)], -1)
            found |= hit.any(1)
        return out

