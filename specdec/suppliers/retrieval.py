"""Retrieval (REST): candidate trees from the continuations of the context's longest suffix in a datastore.

Per row and step: the longest suffix of the committed context (`max_suffix` tokens down to `min_suffix`,
the root included) that occurs in the datastore, found by binary search over its suffix array; up to
`max_matches` of its occurrences; the `continuation` tokens that follow each (stopping at a document's
end); every prefix of those continuations counted, and the most frequent ones (at most `budget` nodes,
root included) merged into a prefix-closed trie. A node's log-prob is log(count / continuations): the
relative frequency of its prefix, i.e. the path probability of the empirical continuation distribution,
the quantity a draft model's path log-prob estimates (SMART's rule and ValuSpec read it). No match: the
root alone, an autoregressive step.

Host-side numpy on the committed tokens `DecodeState` keeps on the host (no device sync), vectorised over
rows, suffix lengths, matches and depths; the only loops are the binary search's ceil(log2 N) rounds.
"""

from __future__ import annotations

import numpy as np
import torch
from transformers import PreTrainedModel

from ..datastore import Datastore
from ..state import DecodeState
from ..tree import TreeBatch
from ..verify import vocab_size
from .base import Supplier
from .trie import prefix_trie

__all__ = ["RetrievalSupplier"]


class RetrievalSupplier(Supplier):
    """REST-style retrieval over `datastore` (a `Datastore`, built with the target's tokenizer).

    budget: the largest tree per row, root included (REST's 64 "choices" exclude the root; here the
    budget counts what the target verifies, like `DraftSupplier(total_tokens=...)` and SMART's budget).
    """

    def __init__(self, datastore: Datastore, *, max_suffix: int = 16, min_suffix: int = 2, max_matches: int = 5000,
                 continuation: int = 10, budget: int = 64):
        if not isinstance(datastore, Datastore):
            raise ValueError(f"datastore: expected a specdec Datastore, got {type(datastore).__name__}")
        for name, value in (("max_suffix", max_suffix), ("min_suffix", min_suffix), ("max_matches", max_matches),
                            ("continuation", continuation), ("budget", budget)):
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name}: expected an int >= 1, got {value!r}")
        if min_suffix > max_suffix:
            raise ValueError(f"min_suffix: {min_suffix} exceeds max_suffix {max_suffix}")
        self.datastore = datastore
        self.max_suffix, self.min_suffix = max_suffix, min_suffix
        self.max_matches, self.continuation, self.budget = max_matches, continuation, budget

    def attach(self, target: PreTrainedModel) -> None:
        if self.datastore.vocab_size > vocab_size(target):
            raise ValueError(f"datastore: built over {self.datastore.vocab_size} token ids, the target's vocabulary has "
                             f"{vocab_size(target)}; build it with the target's tokenizer")

    def max_tree_size(self) -> int:
        return min(self.budget, 1 + self.max_matches * self.continuation)

    def propose(self, state: DecodeState) -> TreeBatch:
        context = self._context(state)  # [B, max_suffix]
        match = self.datastore.longest_match(context, max_suffix=self.max_suffix, min_suffix=self.min_suffix)
        cont = self.datastore.continuations(match, max_matches=self.max_matches, length=self.continuation)
        trie = prefix_trie(cont, budget=self.budget, presorted=True)  # suffix-array order is lexicographic
        device = state.root.device
        tokens = torch.from_numpy(trie.tokens).to(device)
        tokens[:, 0] = state.root
        return TreeBatch(tokens, torch.from_numpy(trie.parents).to(device), torch.from_numpy(trie.num_nodes).to(device),
                         logp=torch.from_numpy(trie.logp()).to(device), max_depth=self.continuation)

    def _context(self, state: DecodeState) -> np.ndarray:
        """[B, max_suffix] int64: each row's last committed tokens, -1 before its start and for finished rows."""
        cols = state.history_len[:, None] - self.max_suffix + np.arange(self.max_suffix)[None, :]
        context = np.take_along_axis(state.history, np.maximum(cols, 0), axis=1)
        keep = (cols >= state.host_start[:, None]) & ~state.finished[:, None]
        return np.where(keep, context, -1)
