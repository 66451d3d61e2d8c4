"""Draft-model suppliers: a greedy chain, or an EAGLE-2 style static tree.

Each step, the draft first catches up: one forward over the tokens the target committed since the
draft last saw them (the previous step's accepted tokens and bonus; the first step: the root), committed
to the draft's own `TreeCache`. Its logits at the root give the depth-1 candidates. Then, layer by layer,
the frontier (the `topk` best nodes of the newest layer by path probability) is forwarded with tree
attention over the draft's tree region, and each frontier node contributes its `topk` children to the
candidate pool. Finally the `total_tokens - 1` best pool nodes by path probability (plus the root) form
the tree. A child's path log-prob never exceeds its parent's and ties keep creation order, so the kept
set is closed under ancestors. The tree region is dropped at `commit`; nothing syncs with the host.

When the call samples (temperature > 0) both modes *sample* their candidates from the draft's warped
distribution q (`Sampling.probs` on the draft's logits, float32) and carry q as ``draft_probs`` for the
recursive rejection rule (`specdec.sampling`). The sampled tree is built so that the rule is lossless:

* the children of every node are, in node order, a without-replacement sample sequence from that node's
  q (Gumbel-top-k, `sample_without_replacement`), and
* the number of children of a node depends only on what was known before they were drawn (the node's
  own path and path probability, the step's earlier layers), never on their own values.

Given everything drawn before a node's children (which fixes how many it gets), they are fresh draws
from its q, so the recursive rule's one-node lemma holds at every node and the output is the target's
by induction over depth. So every drawn child is kept (no rerank by path probability). Layer 1 is the root's `topk` children;
each further layer forwards the `topk` nodes of the newest layer with the highest path probability under
q (their values decide only whether *they* get children), and each of them gets `topk` children. The
node budget (`total_tokens`) cuts whole layers, and in the last layer a suffix fixed before the draw:
the best frontier node's children first (`_sampled_layer_sizes`). Worked example, topk 2, depth 3,
total_tokens 6: root -> {a, b} (drawn from q_root); say P_q(b) > P_q(a): b is forwarded first, then a;
b gets {ba, bb} and a gets {aa} (its second child is drawn and cut: 1 + 2 + 3 = 6 nodes).
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor
from transformers import PreTrainedModel

from ..attention import install, prefill, tree_forward
from ..cache import TreeCache
from ..checks import as_int
from ..state import DecodeState
from ..tree import TreeBatch, pack_bits
from ..sampling import sample, sample_without_replacement
from ..verify import Acceptance, vocab_size
from ..vocab import SharedVocab
from .base import Supplier, check_within, position_limit

__all__ = ["DraftSupplier", "DraftRunner"]


class DraftRunner:
    """The draft model's side of a step, shared by `DraftSupplier` and `SmartSupplier` (and the interface
    an EAGLE runner offers too).

    Owns the draft's `TreeCache` and a per-row *backlog*: the committed tokens the draft has not
    processed yet. `start` queues the prompts' prefill (all but the root, which opens the backlog; it runs
    with the first catch-up); `commit` appends each step's accepted tokens and bonus to the backlog (it
    never overwrites it, so steps that do not draft simply let it grow); `catch_up` forwards the whole
    backlog, ragged rows in one chain forward, commits it to the cache and returns the draft's logits at
    the root; `begin_tree` and `forward_layer` draft a tree over the cache's tree region, dropped at the
    next `commit`.

    backlog: [B] int64 on the host, pending tokens per row (the root included), so a planner prices the
    catch-up without a device sync. It can grow to max_new_tokens plus a tree's depth; the cache is sized
    for it (`DecodeState.capacity` leaves that much room above the committed tokens).

    Vocabularies (`specdec.vocab`): the draft may have more or fewer embedding rows than the target (one
    tokenizer, different padding). The logits it returns are over the target's ids, -inf past the ids
    both share, and ids it cannot embed are fed to it as 0 (`SharedVocab`).
    """

    draft_ids: Tensor | None = None  # the draft's logits are over the target's ids (an EAGLE-3 runner's may not be)

    def __init__(self, draft: PreTrainedModel, backend: str = "auto"):
        self.draft = draft
        self.backend = backend
        self.cache: TreeCache | None = None
        self.vocab = SharedVocab(vocab_size(draft), vocab_size(draft))  # until `attach` meets the target
        self._prompt: tuple[Tensor, Tensor] | None = None  # (ids [B, P - 1], start [B]) until the prefill runs
        self.pending_prefill = 0  # host int: the widest row's prompt tokens still to prefill (0 once done)
        self.backlog = np.zeros(0, dtype=np.int64)
        self._pending = np.zeros((0, 0), dtype=np.int64)  # [B, room]: row b's backlog is [:backlog[b]]

    @property
    def cold(self) -> bool:
        """The draft has not prefilled this call's prompts yet (its next catch-up does)."""
        return self.pending_prefill > 0

    def attach(self, target: PreTrainedModel) -> None:
        self.vocab = SharedVocab.between(self.draft, target)
        if self.draft.device != target.device:
            raise ValueError(f"draft: on {self.draft.device}, the target on {target.device}")
        install(self.draft, "draft")

    @property
    def target_vocab(self) -> int:
        """Width of the logits it returns: the target's vocabulary."""
        return self.vocab.target

    def memory_bytes(self, batch_size: int, capacity: int, region: int, width: int, layers: int) -> tuple[int, int]:
        """(the draft cache's and the tree ancestry's bytes, one layer's logits and their float32
        temporaries) for `start(region=region)` and `begin_tree(width, layers)` at `batch_size`."""
        cache = batch_size * (capacity + region) * TreeCache.slot_bytes(self.draft)
        ancestry = batch_size * (width * layers) ** 2  # begin_tree's bool region
        return cache + ancestry, batch_size * max(width, 1) * self.vocab.target * 16

    def start(self, state: DecodeState, region: int) -> None:
        """Allocate the cache and queue the prompts' prefill; `region`: the most tree slots one step's layers
        occupy. The prefill runs at the first `catch_up`: a call whose steps never draft never runs the draft."""
        B = state.batch_size
        self.cache = TreeCache.for_model(self.draft, B, state.capacity + region)
        self._prompt = (self.vocab.ids(state.input_ids[:, :-1]), state.start)
        self.pending_prefill = state.input_ids.shape[1] - 1 - int(state.host_start.min())  # widest row's prompt
        self._pending = np.zeros((B, max(16, region)), dtype=np.int64)
        self._pending[:, 0] = state.input_ids[:, -1].cpu().numpy()  # host copy, once per call: the roots
        self.backlog = np.ones(B, dtype=np.int64)
        self._rows, self._widest = np.arange(B), 1  # the widest row's backlog, kept on the host as an int

    def commit(self, acc: Acceptance) -> None:
        """Append the accepted tokens and the bonus (the new root) to each row's backlog; drop the tree."""
        self.cache.rollback()
        if acc.host_tokens.shape[1] == 1:
            # Every row committed one token (a plain step, or a tree none of whose candidates was accepted):
            # one column to write. The general path's mask and index arrays cost 75 us a step after the
            # target's forward on the 2-core CPU, 0.5% of a plain step at batch 1
            # (bench/results/2026-12-06-cpu-smart-spread/plain_parts.txt).
            if self._widest + 1 > self._pending.shape[1]:
                self._pending = np.pad(self._pending, ((0, 0), (0, self._pending.shape[1])))
            self._pending[self._rows, self.backlog] = acc.host_tokens[:, 0]
            self.backlog, self._widest = self.backlog + 1, self._widest + 1
            return
        n = acc.host_num_accepted + 1  # [B] tokens each row committed
        need = int((self.backlog + n).max())
        self._widest = need
        if need > self._pending.shape[1]:
            self._pending = np.pad(self._pending, ((0, 0), (0, max(need, 2 * self._pending.shape[1]))))
        cols = np.arange(acc.host_tokens.shape[1])[None, :]
        rows, js = np.nonzero(cols < n[:, None])
        self._pending[rows, self.backlog[rows] + js] = acc.host_tokens[rows, js]
        self.backlog = self.backlog + n

    def backlog_chain(self) -> TreeBatch:
        """The backlog as a ragged chain on the device, [B, max backlog] (row b's first backlog[b] tokens),
        after running the prompts' prefill if it is still queued. The caller forwards it and commits it
        (`TreeCache.commit_prefix(chain.num_nodes, backlog)`), then empties `backlog`."""
        if self._prompt is not None:
            prefill(self.draft, self.cache, *self._prompt, backend=self.backend)
            self._prompt, self.pending_prefill = None, 0
        device, m = self.cache.device, self.backlog
        return TreeBatch.chain(torch.from_numpy(self._pending[:, :int(m.max())]).to(device), torch.from_numpy(m).to(device))

    def catch_up(self) -> Tensor:
        """Forward and commit every row's backlog (one chain forward, ragged rows padded); returns the
        draft's logits at the root, [B, V] (V: the target's ids, see `SharedVocab.logits`). The backlog is
        then empty."""
        cache, m = self.cache, self.backlog
        chain = self.backlog_chain()
        count = chain.num_nodes
        same = bool((m == m.max()).all())  # every row's root is the last column: only its logits are needed
        logits = tree_forward(self.draft, cache, self.vocab.ids(chain.tokens), chain.positions(cache.positions()),
                              chain.ancestor_mask, backend=self.backend, logits_to_keep=1 if same else 0)
        cache.commit_prefix(count, m)
        self._root_pos = cache.positions() - 1  # the catch-up committed the root
        self.backlog, self._widest = np.zeros_like(m), 0
        if same:
            return self.vocab.logits(logits[:, -1])
        return self.vocab.logits(logits.gather(1, (count - 1)[:, None, None].expand(-1, 1, logits.shape[-1]))[:, 0])

    def begin_tree(self, width: int, layers: int) -> None:
        """Prepare up to `layers` frontier forwards of at most `width` nodes each. The tree region's slots
        are numbered in forwarding order: a layer's nodes follow the previous layer's."""
        B = self.cache.batch_size
        self._slots, self._used = width * layers, 0
        self._region = torch.zeros(B, self._slots, self._slots, dtype=torch.bool, device=self.cache.device)
        self._layer = 0

    def forward_layer(self, tokens: Tensor, parent_slot: Tensor | None) -> Tensor:
        """Forward one frontier layer; returns its logits [B, F, V] (over the target's ids).

        tokens:      [B, F] int64, the frontier nodes (F <= the tree's width; inactive slots may hold any
                     token id). They take tree-region slots [used, used + F), used = the nodes forwarded
                     before them in this tree.
        parent_slot: [B, F] int64, tree-region slot of each node's parent (a node of the previous layer),
                     or None for the first layer (children of the root).
        """
        B, F = tokens.shape
        d, s0 = self._layer + 1, self._used
        bits = layer_ancestry(self._region, s0, parent_slot, F)
        self._layer, self._used = d, s0 + F
        logits = tree_forward(self.draft, self.cache, tokens, (self._root_pos + d)[:, None].expand(B, F),
                              pack_bits(bits[:, :, : s0 + F]), backend=self.backend)
        return self.vocab.logits(logits)


def layer_ancestry(region: Tensor, s0: int, parent_slot: Tensor | None, width: int) -> Tensor:
    """The ancestry bits of a tree layer of `width` nodes per row taking tree-region slots [s0, s0 + width):
    each node's parent's bits (parent_slot [B, F] int64, None for the root's children) plus its own slot.
    Written into `region` ([B, slots, slots] bool, shared by the drafter runners) and returned, [B, F, slots]."""
    B, slots = region.shape[0], region.shape[-1]
    if s0 + width > slots:
        raise ValueError(f"tokens: {width} more nodes overflow the {slots} tree slots begin_tree reserved")
    if parent_slot is None:
        bits = torch.zeros(B, width, slots, dtype=torch.bool, device=region.device)
    else:
        bits = region.gather(1, parent_slot[:, :, None].expand(B, width, slots))
    rows = torch.arange(width, device=region.device)
    bits[:, rows, s0 + rows] = True
    region[:, s0:s0 + width] = bits
    return bits


class DraftSupplier(Supplier):
    """Candidates from a smaller model sharing the target's tokenizer.

    mode="chain": the draft's greedy continuation of `depth` tokens (topk and total_tokens unused); when
                  the call samples (temperature > 0), each token is instead *sampled* from the draft's
                  distribution under the same warpers, and the tree carries those distributions
                  (`TreeBatch.draft_probs`) for the recursive rejection rule.
    mode="tree":  depth layers, top-`topk` children per frontier node, the best `total_tokens` nodes
                  (root included) kept by path probability. When the call samples, the children are
                  instead sampled without replacement from the draft's warped distributions, every drawn
                  child is kept, and the budget cuts only whole layers or a suffix fixed before the draw
                  (module docstring: the conditions that keep the recursive rule lossless); the tree
                  carries ``draft_probs``.
    """

    def __init__(self, draft: PreTrainedModel, mode: str = "tree", depth: int = 5, topk: int = 4,
                 total_tokens: int = 32, *, backend: str = "auto"):
        self._configure(mode, depth, topk, total_tokens, vocab_size(draft))
        self.draft = draft
        self.runner = DraftRunner(draft, backend)
        self.backend = backend

    def _configure(self, mode: str, depth: int, topk: int, total_tokens: int, vocab: int) -> None:
        """Check and set the tree's shape (shared with `EagleSupplier`, whose runner drafts the same trees)."""
        if mode not in ("chain", "tree"):
            raise ValueError(f"mode: expected 'chain' or 'tree', got {mode!r}")
        depth, topk, total_tokens = (as_int(v, name, low) for v, name, low in (
            (depth, "depth", 1), (topk, "topk", 1), (total_tokens, "total_tokens", 2)))
        self.mode = mode
        self.depth = depth
        self.topk = 1 if mode == "chain" else topk
        pool = 1 + self.topk + (depth - 1) * self.topk * self.topk
        self.total_tokens = depth + 1 if mode == "chain" else min(total_tokens, pool)
        self.requested_total = total_tokens
        if self.topk > vocab:
            raise ValueError(f"topk: {topk} exceeds the draft's vocabulary of {vocab}")

    def attach(self, target: PreTrainedModel) -> None:
        """Bounds that need the target: a tree deeper or larger than the models' positions, or more
        children per node than the ids draft and target share, is a ValueError naming the argument."""
        self.runner.attach(target)
        self._check_bounds(position_limit(target, self.draft), self.runner.vocab.size)

    def _check_bounds(self, limit: int | None, shared_ids: int) -> None:
        """The tree's shape against the models' positions (`limit`) and the ids drafter and target share."""
        check_within("depth", self.depth, None if limit is None else limit - 1,
                     f"the depth the models' {limit} positions allow")
        if self.mode == "tree":
            check_within("total_tokens", self.requested_total, limit, "the models' positions")
        check_within("topk", self.topk, shared_ids, "the token ids the draft shares with the target")

    def max_tree_size(self) -> int:
        return self.total_tokens

    def _region(self) -> int:
        return self.depth + 1 + (self.depth - 1) * self.topk  # the catch-up chain, then the frontier layers

    def memory_bytes(self, batch_size: int, capacity: int) -> dict[str, int]:
        cache, logits = self.runner.memory_bytes(batch_size, capacity, self._region(), self.topk, self.depth - 1)
        verify = batch_size * self.total_tokens * self.runner.target_vocab * 8  # target logits, sampled q rows
        if self.mode == "chain":
            return {"depth": cache + logits + verify}
        return {"depth": cache, "topk": logits, "total_tokens": verify}

    def start(self, state: DecodeState) -> None:
        self.runner.start(state, region=self._region())

    def commit(self, acc: Acceptance) -> None:
        self.runner.commit(acc)

    def propose(self, state: DecodeState) -> TreeBatch:
        if not state.sampling.greedy:
            return self._sample_chain(state) if self.mode == "chain" else self._sample_tree(state)
        B, k, device = state.batch_size, self.topk, state.root.device
        # An EAGLE-3 head's logits stay over its draft vocabulary and the children's columns are mapped to
        # target ids (`ids`, increasing): the same log-probs as over the widened logits (-inf elsewhere), at
        # half the width and without the widening (on the embedded head, ~0.2 ms of a ~10 ms step at batch 1).
        ids = self.runner.draft_ids
        narrow = {} if ids is None else {"narrow": True}
        as_target = (lambda t: t) if ids is None else (lambda t: ids[t])  # noqa: E731
        root_logp = torch.log_softmax(self.runner.catch_up(**narrow).float(), dim=-1)
        logp, tok = root_logp.topk(k, dim=-1)  # [B, k]
        tok = as_target(tok)
        # Candidate pool in creation order: the root, then each layer's children.
        pool_tok = [state.root[:, None], tok]
        pool_par = [torch.full((B, 1), -1, device=device, dtype=torch.int64),
                    torch.zeros(B, k, device=device, dtype=torch.int64)]
        pool_logp = [torch.zeros(B, 1, device=device), logp]
        frontier = torch.arange(1, k + 1, device=device).expand(B, k)  # pool index of each frontier node
        parent_slot = None
        self.runner.begin_tree(k, self.depth - 1)
        for d in range(1, self.depth):
            ftok = torch.cat(pool_tok, 1).gather(1, frontier)
            flogp = torch.cat(pool_logp, 1).gather(1, frontier)
            logits = self.runner.forward_layer(ftok, parent_slot, **narrow)
            child_logp = flogp[:, :, None] + torch.log_softmax(logits.float(), dim=-1)  # [B, k, V]
            clogp, ctok = child_logp.topk(k, dim=-1)  # [B, k, k]
            pool_tok.append(as_target(ctok.flatten(1)))
            pool_par.append(frontier[:, :, None].expand(B, k, k).flatten(1))
            pool_logp.append(clogp.flatten(1))
            best = clogp.flatten(1).topk(k, dim=-1).indices  # next frontier among the k*k children
            parent_slot = (d - 1) * k + best // k
            frontier = sum(t.shape[1] for t in pool_tok[:-1]) + best
        return self._select(torch.cat(pool_tok, 1), torch.cat(pool_par, 1), torch.cat(pool_logp, 1))

    def _sample_chain(self, state: DecodeState) -> TreeBatch:
        """A chain of `depth` tokens, each drawn from the draft's warped distribution q at its parent with
        the call's generator; ``draft_probs[:, i]`` is that q (the leaf's row: zeros, it has no child).
        logp holds the draft's unwarped path log-probs, as greedy chains write them (ValuSpec reads them)."""
        B, device = state.batch_size, state.root.device
        logits = self.runner.catch_up()  # [B, V]
        tokens, probs, logp = [state.root], [], [torch.zeros(B, device=device)]
        self.runner.begin_tree(1, self.depth - 1)
        for d in range(1, self.depth + 1):
            q = state.sampling.probs(logits)  # [B, V]
            x = sample(q, state.generator)  # [B]
            tokens.append(x)
            probs.append(q)
            logp.append(logp[-1] + torch.log_softmax(logits.float(), -1).gather(1, x[:, None])[:, 0])
            if d < self.depth:  # the leaf is not forwarded: nothing is drawn below it
                parent = None if d == 1 else torch.full((B, 1), d - 2, dtype=torch.int64, device=device)
                logits = self.runner.forward_layer(x[:, None], parent)[:, 0]
        probs.append(torch.zeros_like(probs[-1]))
        num_nodes = torch.full((B,), self.depth + 1, dtype=torch.int64, device=device)
        return TreeBatch.chain(torch.stack(tokens, 1), num_nodes, logp=torch.stack(logp, 1),
                               draft_probs=torch.stack(probs, 1))

    def _sampled_layer_sizes(self) -> list[int]:
        """Nodes of each sampled layer kept under the budget (host ints, fixed before any draw): layer 1
        has topk, later layers topk * topk, the last one cut to what is left of `total_tokens`."""
        k, left = self.topk, self.total_tokens - 1
        sizes = [min(k, left)]
        while len(sizes) < self.depth and sum(sizes) < left:
            sizes.append(min(k * k, left - sum(sizes)))
        return sizes

    def _sample_tree(self, state: DecodeState) -> TreeBatch:
        """The sampled tree (module docstring), nodes in creation order: the root, then each layer's
        children grouped by parent in frontier order, cut to `total_tokens`. ``draft_probs[:, i]`` is the
        q node i's children were drawn from (zeros at nodes never forwarded; a frontier node whose
        children the budget cut keeps its q, unused); logp holds the draft's unwarped path log-probs, as
        greedy trees write them (ValuSpec reads them)."""
        B, k, device = state.batch_size, self.topk, state.root.device
        sizes = self._sampled_layer_sizes()
        zero = torch.zeros(B, 1, device=device)
        q, ctok, clogp, clogq = _draw_children(self.runner.catch_up()[:, None], zero, zero, k, state)
        toks, pars = [state.root[:, None], ctok[:, 0]], [zero.long() - 1, zero.long().expand(B, k)]
        logps, qs = [zero, clogp[:, 0]], [q]
        layer_logq, layer_start, parent_slot = clogq[:, 0], 1, None  # [B, n]: path log q of the newest layer
        self.runner.begin_tree(k, len(sizes) - 1)
        for d in range(1, len(sizes)):  # forward layer d's frontier; its children form layer d + 1
            n = layer_logq.shape[1]
            front = layer_logq.topk(k, dim=-1).indices  # [B, k], best first: decided before their children
            if d > 1:  # layer d's node c is the child of layer d-1's frontier node c // k, at that slot
                parent_slot = (d - 2) * k + front // k
            logits = self.runner.forward_layer(toks[-1].gather(1, front), parent_slot)
            q, ctok, clogp, clogq = _draw_children(logits, logps[-1].gather(1, front), layer_logq.gather(1, front),
                                                   k, state)
            qs.append(torch.zeros(B, n, q.shape[-1], device=device).scatter_(
                1, front[:, :, None].expand_as(q), q))
            toks.append(ctok.flatten(1))
            pars.append((layer_start + front)[:, :, None].expand(B, k, k).flatten(1))
            logps.append(clogp.flatten(1))
            layer_logq, layer_start = clogq.flatten(1), layer_start + n
        qs.append(torch.zeros(B, layer_logq.shape[1], q.shape[-1], device=device))  # the newest layer: leaves
        M = self.total_tokens
        return TreeBatch(torch.cat(toks, 1)[:, :M], torch.cat(pars, 1)[:, :M].contiguous(),
                         torch.full((B,), M, dtype=torch.int64, device=device), torch.cat(logps, 1)[:, :M],
                         max_depth=len(sizes), draft_probs=torch.cat(qs, 1)[:, :M])

    def _select(self, tok: Tensor, par: Tensor, logp: Tensor) -> TreeBatch:
        """Keep the root and the best `total_tokens - 1` pool nodes, renumbered in creation order."""
        B, N = tok.shape
        M = self.total_tokens
        order = torch.sort(-logp[:, 1:], dim=1, stable=True).indices[:, : M - 1] + 1
        keep = torch.sort(torch.cat([torch.zeros(B, 1, dtype=torch.int64, device=tok.device), order], 1), 1).values
        renumber = torch.full((B, N), -1, dtype=torch.int64, device=tok.device)
        renumber.scatter_(1, keep, torch.arange(M, device=tok.device).expand(B, M).contiguous())
        parents = par.gather(1, keep)
        parents = torch.where(parents >= 0, renumber.gather(1, parents.clamp(min=0)), -1)
        return TreeBatch(tok.gather(1, keep), parents, torch.full((B,), M, dtype=torch.int64, device=tok.device),
                         logp.gather(1, keep), max_depth=self.depth)


def _draw_children(logits: Tensor, path_logp: Tensor, path_logq: Tensor, k: int,
                   state: DecodeState) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """k children for each of F nodes, drawn without replacement from the draft's warped distribution.

    logits: [B, F, V] the draft's at the nodes; path_logp, path_logq: [B, F] their path log-probs under
    the raw draft and under q. Returns q [B, F, V] float32, the children's tokens [B, F, k] in draw order
    and their path log-probs [B, F, k] under the raw draft and under q (-inf past q's support).
    """
    q = state.sampling.probs(logits)
    tok = sample_without_replacement(q, k, state.generator)
    logp = path_logp[:, :, None] + torch.log_softmax(logits.float(), -1).gather(2, tok)
    return q, tok, logp, path_logq[:, :, None] + q.gather(2, tok).log()
