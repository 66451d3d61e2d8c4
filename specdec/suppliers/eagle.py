"""EAGLE drafting: `EagleRunner` (the head's side of a step, the drafter interface `DraftRunner` offers)
and `EagleSupplier` (EAGLE-2's dynamic tree or a chain, greedy or sampled, built through the runner).

**Where the head's inputs come from.** The verifier returns, with each `Acceptance`, the target's hidden
states at the accepted nodes (and, the first time, at the prompt block it forwarded with the first tree),
because the generator asked it for the head's `feature_layers`. No second target forward. `commit`
appends those pairs (token, feature) to a per-row backlog, whether the step drafted or not; `catch_up`
forwards the whole backlog through the head (ragged rows, one forward) and keeps K/V of committed pairs
only. The first step of a generation has no features yet and is a plain AR step.

**A cold head reads a window.** Until its first catch-up in a call, the head keeps only the newest `window`
pairs of each row's queue (the prompt's end, and the plain steps a planner took before drafting), and its
first catch-up forwards those alone. The target's features already carry the whole context, and the head
needs its own attention over the nearest pairs most: on the demo pair a window of 64 cost the shipped head
0.4-1.2% of its accepted length at batch 1, and the head's 4:2:8 tree ran 3-6% faster at batch 8 and 16
(HumanEval and Spec-Bench), where the catch-up over whole padded prompts of up to 294 tokens was several target steps
(bench/results/2026-12-07-cpu-head-window/). RoPE is relative, so the kept pairs may start at position 0.

Example, one row, prompt "a b c": step 1 verifies the root c alone (with the prompt block a b) and
accepts d; commit queues the pairs (b, f_a), (c, f_b) from the prompt block and (d, f_c) from the tree.
Step 2's catch-up forwards those three pairs; the output at (d, f_c) gives the children of the root d.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor
from transformers import PreTrainedModel

from .. import ops
from ..eagle import EagleHead
from ..checks import as_int
from ..ops._backend import resolve_backend
from ..state import DecodeState
from ..tree import TreeBatch, pack_bits
from ..verify import Acceptance, vocab_size
from .base import position_limit, root_only
from .draft import DraftSupplier, layer_ancestry

__all__ = ["EagleRunner", "EagleSupplier", "WINDOW"]

WINDOW = 64  # the most pairs a cold head's first catch-up in a call forwards per row (module docstring)


class EagleRunner:
    """The head's side of a step, with `DraftRunner`'s interface and meaning (attach, start, commit,
    backlog, catch_up, begin_tree, forward_layer), so any supplier that drives a draft model drives a head.

    backlog: [B] int64 (host): pairs per row the head's next catch-up forwards; 0 before the first commit
    (nothing to draft from: propose a root-only tree). window: the most pairs a row's first catch-up of a
    call forwards (module docstring; None: every pair, the whole prompt included).
    """

    def __init__(self, head: EagleHead, backend: str = "auto", window: int | None = WINDOW):
        if not isinstance(head, EagleHead):
            raise TypeError(f"head: expected a specdec EagleHead, got {type(head).__name__}")
        self.window = None if window is None else as_int(window, "window", 1)
        self.head = head
        self.backend = backend
        self.backlog = np.zeros(0, dtype=np.int64)
        # No separate prompt prefill (the prompt's pairs join the backlog with the first verification's
        # features), so nothing beyond the backlog for a planner to price; `DraftRunner` has one.
        self.pending_prefill = 0
        self._read_prompt = False

    @property
    def cold(self) -> bool:
        """The head has not read this call's prompt yet: its next catch-up forwards the whole prompt."""
        return not self._read_prompt

    @property
    def feature_layers(self) -> tuple[int, ...]:
        return self.head.feature_layers

    @property
    def draft_ids(self) -> Tensor | None:
        """[Vd] int64, the target id of each column of a `narrow` logits row; None: no narrower logits."""
        return self.head.draft_ids

    @property
    def target_vocab(self) -> int:
        """Width of the logits it returns: the target's vocabulary (ids outside the draft vocabulary: -inf)."""
        return self.head.config.vocab_size

    def memory_bytes(self, batch_size: int, capacity: int, region: int, width: int, layers: int) -> tuple[int, int]:
        """(the head's cache, tree outputs and ancestry bytes and the target features it may hold, one layer's
        logits and their float32 temporaries) for `start(region=region)` and `begin_tree(width, layers)` at
        `batch_size`. The features of every pair not read yet stay queued until the next catch-up: the
        prompt's until the first, and under SMART every plain step's, up to the whole call (`capacity`
        pairs a row, each len(feature_layers) target hidden states wide)."""
        c, size = self.head.config, self.head.fc.weight.element_size()
        cache = batch_size * (capacity + region) * 2 * c.num_kv_heads * c.head_dim * size  # one layer's K and V
        tree = batch_size * width * layers * (c.hidden_size * size + width * layers)  # outputs, bool ancestry
        features = batch_size * capacity * len(c.aux_layers) * c.target_hidden_size * size
        return cache + tree + features, batch_size * max(width, 1) * c.vocab_size * 16

    def attach(self, target: PreTrainedModel) -> None:
        """The head must have been built for this target (it reads the target's embedding matrix)."""
        if self.head.embed.device != target.device:
            raise ValueError(f"head: on {self.head.embed.device}, the target on {target.device}")
        if self.head.config.vocab_size != vocab_size(target) or not self.head.reads(target):
            raise ValueError("head: built for another target; load it with EagleHead.from_pretrained(path, target)")

    def start(self, state: DecodeState, region: int) -> None:
        """A fresh cache: every pair a generation commits fits (`state.capacity`), plus `region` tree slots."""
        B = state.batch_size
        self.cache = self.head.new_cache(B, state.capacity + region)
        self._rope = self.head.rope_table(self.cache.capacity)  # [2, S, D]: every position the cache can hold
        # On the sdpa path (CPU, GPUs without Triton) the runner writes each forward's dense mask itself: a
        # handful of ops instead of packing ancestor bits that the attention then unpacks (measured: the
        # mask work was a fifth of a draft layer's time on this CPU).
        self._dense = resolve_backend(self.backend, self.cache.device, fast_torch="sdpa") == "sdpa"
        tau = self.head.config.greedy_temperature
        self._sharpen = 1.0 / tau if state.sampling.greedy and tau != 1.0 else None  # ranks only: argmax unchanged
        self._chunks: list[tuple[Tensor, Tensor, Tensor, Tensor]] = []  # (tokens, features, first, count)
        self.backlog = np.zeros(B, dtype=np.int64)
        self._read_prompt = False
        self._prompt = (state.input_ids[:, 1:], state.start, state.host_start)  # tokens the prompt features predicted

    def commit(self, acc: Acceptance) -> None:
        """Queue the step's pairs: the accepted tokens and the bonus with the features that predicted them
        (and, after the first verification, the prompt block's)."""
        if acc.features is None:
            raise ValueError("acc: carries no target features; the verifier must be asked for the head's "
                             "feature_layers (SpeculativeGenerator does it)")
        self.cache.rollback()
        if acc.prompt_features is not None and acc.prompt_features.shape[1]:
            ids, start, host_start = self._prompt
            self._chunks.append((ids, acc.prompt_features, start, ids.shape[1] - start))
            self.backlog += ids.shape[1] - host_start
        zero = torch.zeros_like(acc.num_accepted)
        self._chunks.append((acc.tokens.clamp(min=0), acc.features, zero, acc.num_accepted + 1))
        self.backlog += acc.host_num_accepted + 1
        if self.window is not None and not self._read_prompt:  # cold: only the newest pairs will be read
            np.minimum(self.backlog, self.window, out=self.backlog)

    def catch_up(self, narrow: bool = False) -> Tensor:
        """Forward and commit every queued pair; returns the head's logits at the root, [B, V] (tokens
        outside its draft vocabulary: -inf; `narrow`: [B, Vd], over the draft vocabulary alone)."""
        if not self.backlog.all():
            raise RuntimeError("catch_up: a row has no pending pair (before the first commit, or twice in a step)")
        tokens, features, count = self._pack()
        cache, N = self.cache, tokens.shape[1]
        positions = cache.positions()[:, None] + torch.arange(N, device=tokens.device)  # padding: any position
        mask = self._chain_plan(count, N) if self._dense else TreeBatch.chain(tokens, count).ancestor_mask
        hidden = self.head(tokens, features, positions, cache, mask, self._rope, project=True,
                           backend=self.backend)  # [B, N, H]
        cache.commit_prefix(count, self.backlog)
        self._root_hidden = hidden.gather(1, (count - 1)[:, None, None].expand(-1, 1, hidden.shape[-1]))[:, 0]
        self._root_pos = cache.positions() - 1  # the root's pair is the newest committed one
        self._chunks = []
        self.backlog = np.zeros_like(self.backlog)
        self._read_prompt = True
        return self._logits(self._root_hidden, narrow)

    def _logits(self, hidden: Tensor, narrow: bool = False) -> Tensor:
        """The head's logits over the target's vocabulary (`narrow`: over its draft vocabulary, whose ids
        `EagleHead.draft_ids` maps), divided by its greedy temperature when decoding greedily (sampling draws
        from the head's own distribution)."""
        logits = self.head.draft_logits(hidden) if narrow else self.head.logits(hidden)
        return logits if self._sharpen is None else logits * self._sharpen

    def _pack(self) -> tuple[Tensor, Tensor, Tensor]:
        """The queued chunks as one right-padded ragged block: tokens [B, N], features [B, N, F], count [B]:
        each row's newest `backlog` pairs (all of them unless a cold head's window dropped the oldest)."""
        if len(self._chunks) == 1:  # the usual step: last step's acceptance, already in place
            tokens, features, _, count = self._chunks[0]
            return tokens, features, count
        B, N = self.backlog.shape[0], int(self.backlog.max())
        F, ref = self._chunks[-1][1].shape[-1], self._chunks[-1][1]
        out_tok = torch.zeros(B, N + 1, dtype=torch.int64, device=ref.device)  # column N: scratch
        out_feat = torch.zeros(B, N + 1, F, dtype=ref.dtype, device=ref.device)
        keep = torch.from_numpy(self.backlog).to(ref.device)
        offset = -(sum(count for *_, count in self._chunks) - keep)  # [B]: minus the pairs each row drops
        for tokens, features, first, count in self._chunks:
            j = torch.arange(tokens.shape[1], device=ref.device)[None, :] - first[:, None]  # [B, W]
            dst = offset[:, None] + j
            dst = torch.where((j >= 0) & (j < count[:, None]) & (dst >= 0), dst, N)
            out_tok.scatter_(1, dst, tokens)
            out_feat.scatter_(1, dst[:, :, None].expand(-1, -1, F), features.to(ref.dtype))
            offset = offset + count
        return out_tok[:, :N], out_feat[:, :N], keep

    def _chain_plan(self, count: Tensor, N: int) -> ops.SdpaPlan:
        """The catch-up's dense mask: pair j of row b (j < count[b]) sees the row's committed slots and
        pairs 0..j; padding pairs see only themselves."""
        cache = self.cache
        kv_len = int(cache.host_length.max()) + N
        slots = torch.arange(kv_len, device=count.device)
        rel = (slots[None, :] - cache.length[:, None])[:, None, :]  # [B, 1, kv]: slot's index among the new pairs
        j = torch.arange(N, device=count.device)[None, :, None]  # [1, N, 1]
        real = (slots[None, None, :] >= cache.start[:, None, None]) & (rel <= j)
        mask = torch.where(j < count[:, None, None], real, rel == j)
        return ops.SdpaPlan(kv_len, mask[:, None])

    def begin_tree(self, width: int, layers: int) -> None:
        """Prepare up to `layers` frontier forwards of at most `width` nodes each; the tree region's slots are
        numbered in forwarding order, a layer's nodes after the previous layer's (as `DraftRunner.begin_tree`)."""
        B, H = self.cache.batch_size, self.head.config.hidden_size
        self._slots, self._used = width * layers, 0
        self._region = torch.zeros(B, self._slots, self._slots, dtype=torch.bool, device=self.cache.device)
        self._hidden = torch.zeros(B, self._slots, H, dtype=self._root_hidden.dtype, device=self.cache.device)
        self._layer = 0
        if self._dense:  # the committed prefix each row's nodes see, and where its tree slots lie
            cache = self.cache
            slots = torch.arange(int(cache.host_length.max()) + self._slots, device=cache.device)
            self._prefix = (slots[None, :] >= cache.start[:, None]) & (slots[None, :] < cache.length[:, None])
            self._columns = cache.length[:, None] + torch.arange(self._slots, device=cache.device)  # [B, slots]

    def forward_layer(self, tokens: Tensor, parent_slot: Tensor | None, narrow: bool = False) -> Tensor:
        """Forward one frontier layer; returns its logits [B, F, V] (`narrow`: [B, F, Vd], as `catch_up`).

        tokens:      [B, F] int64, the frontier nodes; parent_slot: [B, F] int64, tree-region slot of each
                     node's parent, or None for the first layer (children of the root). A node's pair is
                     (its token, its parent's output).
        """
        B, F = tokens.shape
        d, s0 = self._layer + 1, self._used
        bits = layer_ancestry(self._region, s0, parent_slot, F)
        if parent_slot is None:
            parent = self._root_hidden[:, None].expand(B, F, -1)
        else:
            parent = self._hidden.gather(1, parent_slot[:, :, None].expand(B, F, self._hidden.shape[-1]))
        self._layer, self._used = d, s0 + F
        if self._dense:
            kv_len = int(self.cache.host_length.max()) + s0 + F
            mask = self._prefix[:, None, :kv_len].expand(B, F, kv_len).clone()
            mask.scatter_(2, self._columns[:, None, : s0 + F].expand(B, F, s0 + F), bits[:, :, : s0 + F])
            mask = ops.SdpaPlan(kv_len, mask[:, None])
        else:
            mask = pack_bits(bits[:, :, : s0 + F])
        hidden = self.head(tokens, parent, (self._root_pos + d)[:, None].expand(B, F), self.cache, mask, self._rope,
                           project=False, backend=self.backend)
        self._hidden[:, s0:s0 + F] = hidden
        return self._logits(hidden, narrow)


class EagleSupplier(DraftSupplier):
    """Candidates from an EAGLE head: EAGLE-2's dynamic tree (``mode="tree"``: one head forward per depth
    over the frontier, the top-`topk` children of every frontier node by path log-probability, the best
    `topk` of them the next frontier, the whole pool re-ranked to `total_tokens` nodes, root included) or
    a chain (``mode="chain"``: the head's greedy continuation of `depth` tokens). When the call samples,
    both sample from the head's warped distribution and carry it for the recursive rule, exactly as
    `DraftSupplier` does with a draft model (its docstring: why that is lossless).

    head: an `EagleHead` loaded for the generator's target (`EagleHead.from_pretrained(path, target)`);
    window: the most pairs (prompt and plain steps) its first catch-up of a call reads per row (`EagleRunner`).
    """

    def __init__(self, head: EagleHead, *, mode: str = "tree", depth: int = 6, topk: int = 4, total_tokens: int = 16,
                 window: int | None = WINDOW, backend: str = "auto"):
        if not isinstance(head, EagleHead):
            raise TypeError(f"head: expected a specdec EagleHead, got {type(head).__name__}")
        vocab = head.config.draft_vocab_size
        self._configure(mode, depth, topk, total_tokens, vocab)
        self.head = head
        self.runner = EagleRunner(head, backend, window)
        self.backend = backend

    def feature_layers(self) -> tuple[int, ...]:
        return self.runner.feature_layers

    def attach(self, target: PreTrainedModel) -> None:
        self.runner.attach(target)
        self._check_bounds(position_limit(target), self.head.config.draft_vocab_size)

    def propose(self, state: DecodeState) -> TreeBatch:
        if not self.runner.backlog.all():  # the first step: no target features yet
            return root_only(state.root)
        return super().propose(state)
