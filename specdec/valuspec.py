"""ValuSpec: score every branch of a candidate tree with a small LM, verify only those worth it (docs/valuspec.md).

A *branch* is a root-to-leaf path of a row's tree; its score is the mean log-prob of its tokens (the
root excluded) under a scorer model that shares the target's tokenizer. `ValuSpecFilter` keeps the union
of the branches whose score reaches the threshold of their length, tau_d for a branch of d tokens (so
the kept set is closed under ancestors), and cuts the rest; a row left with its root alone takes a plain
AR step. The thresholds come from `specdec.calibrate` (a `Calibration`); ``length_aware=False`` judges
every branch by the one tau of the paper. `FixedThresholdFilter` is the paper's baseline, a fixed
per-token probability cut-off.

Worked example, one row, root r with children a (log-prob -0.1) and b (-3.0), grandchild c under a (-0.5),
tau_1 = -2, tau_2 = -1: branch r-a-c (2 tokens) scores (-0.1 - 0.5) / 2 = -0.3 >= tau_2 (kept), branch
r-b (1 token) scores -3.0 < tau_1 (cut); the verified tree is r, a, c. With ``unit="prefix"`` every node
is judged by the threshold of its own depth: a (-0.1 >= tau_1) would qualify on its own too.

Per-step gate (`specdec.gate`). Before scoring, a gate may decide from host-known quantities (the tree's
padded width, the batch, measured timings: nothing that waits for the device) that this step is not
worth scoring; the tree then goes to the target unfiltered, and the scorer catches up on the skipped
steps' tokens at its next forward. Given a cost model (``cost_model=``: SMART's `CostModel` or a
`Profile`) the filter's gate is a `CostGate`: it scores when the verification saved beats the scoring,
and after the threshold rule it sizes the scored tree (`ScoringGate.size`) to the one padded width with
the most predicted tokens per second. Without a gate every step is scored and nothing is sized.

Pruning aimed at the padded width (`fill_to_width`). Under a batch the target's forward costs what the
widest row's tree costs; a row cut below the widest kept row saves only attention. So after the
threshold rule, each row gets back its best cut nodes (by the path's worst margin over the threshold,
ancestors first) up to the padded width the cut leaves: the same verify cost, more candidates. At batch
1 it changes nothing. ``fill=False`` keeps the threshold rule alone (the paper's).

Scoring (`BranchScorer`). The scorer keeps its own `TreeCache` through a `DraftRunner` (prefill, and the
catch-up chain of the tokens the target accepted last step). Each step one scorer forward covers the
catch-up chain and the tree's non-root nodes together (tree attention: tree nodes see the whole chain and
their own ancestors); the chain is committed, the tree dropped. The scorer's final hidden state at each
node's parent and its LM head give the node's log-prob through K3 `token_logprob` (no [N, V] logits on
the Triton path), and `path_mean` the branch scores at the leaves.

Draft-logp reuse. When the supplier's own draft model *is* the scorer (``supplier.runner.draft is
scorer.model``, checked at `attach`) and the supplier's trees carry `logp` (path log-probs, as every
draft supplier writes them), the per-token log-probs are ``logp[i] - logp[parent[i]]``, the very numbers
a second forward of the same model would give: no scorer forward, no scorer cache. ``reuse_draft_logp=False``
forces the forward (tests compare the two).
"""

from __future__ import annotations

import math
import time
from dataclasses import replace

import numpy as np
import torch
from torch import Tensor
from transformers import PreTrainedModel

from . import ops
from .attention import install, tree_forward
from .calibration import Calibration
from .cost import CostModel
from .gate import CostGate, ScoringGate, StepPlan
from .profiling import Profile
from .parallel import full_weight
from .stages import FilterStats, StepRecord, Supplier, TreeFilter
from .state import DecodeState
from .suppliers.draft import DraftRunner
from .tree import TreeBatch, pack_bits, unpack_bits
from .verify import Acceptance, greedy_accept

__all__ = ["BranchScorer", "ValuSpecFilter", "FixedThresholdFilter", "ScoringGate", "StepPlan", "keep_branches",
           "fill_to_width"]

# Counters kept on the device during decoding (no sync per step), in FilterStats field order.
_COUNTERS = ("rows", "supplier_empty", "filter_emptied", "branches", "branches_kept", "nodes", "nodes_kept",
             "accepted", "audited", "false_discards", "tokens_lost", "rule_discards")
_ACCEPTED, _AUDIT = _COUNTERS.index("accepted"), _COUNTERS.index("audited")
FOLD = 64  # unscored steps whose trees are counted together (`ValuSpecFilter._count_whole`)

# The defaults, chosen from bench/results/2026-12-01-cpu-valuspec-lengths/ (README, ValuSpec section).
DEFAULT_UNIT = "prefix"
DEFAULT_LENGTH_AWARE = True


def keep_branches(tree: TreeBatch, scores: Tensor, taus: Tensor | float, unit: str = "branch") -> Tensor:
    """[B, T] bool: the nodes on some branch whose leaf scores >= the threshold of its length, and every root.

    scores: [B, T] float32, `path_mean` of the node log-probs (a branch's score is the value at its leaf).
    taus:   [L] float32 (or one float): taus[d - 1] judges a path of d tokens, i.e. a node at depth d;
            depths beyond L take taus[L - 1], so a single value is one tau for every length.
    unit "prefix": any node whose own root-to-node path scores >= the threshold of its depth qualifies,
    not only leaves, so the good first tokens of a branch with a bad tail survive. Either way the kept set
    is the union of the qualifying nodes' root paths, closed under ancestors by construction.
    """
    B, T = tree.tokens.shape
    taus = torch.as_tensor(taus, dtype=torch.float32, device=scores.device).reshape(-1)  # [L]
    bar = taus[tree.depth.clamp(1, taus.shape[0]) - 1]  # [B, T]: the threshold of each node's path length
    good = (tree.leaves if unit == "branch" else tree.valid) & (scores >= bar)  # [B, T]
    good[:, 0] = False  # a root-only tree's root is a "leaf" but no branch
    on = unpack_bits(tree.ancestor_mask, T) & good[:, :, None]  # [B, leaf, node]
    keep = on.any(1)
    keep[:, 0] = True
    return keep & tree.valid


def fill_to_width(tree: TreeBatch, keep: Tensor, scores: Tensor, taus: Tensor | float) -> Tensor:
    """[B, T] bool: `keep` plus, in each row, its best cut nodes up to the widest row's kept count (the
    padded width verification pays for). A node's rank is the worst margin (path score minus the threshold
    of its depth) along its root path, so a parent ranks at least as high as its child and, ties going to
    the lower index (a parent's), the result stays closed under ancestors.

    Example: row 0 keeps 5 nodes, row 1 keeps 2 of its 6: the padded width is 5 either way, so row 1
    gets back its 3 best cut nodes. keep, scores: [B, T] as `keep_branches` takes and returns them.
    """
    B, T = tree.tokens.shape
    taus = torch.as_tensor(taus, dtype=torch.float32, device=scores.device).reshape(-1)  # [L]
    bar = taus[tree.depth.clamp(1, taus.shape[0]) - 1]  # [B, T]
    margin = (scores - bar).masked_fill(tree.depth == 0, float("inf"))  # [B, T]: the root never limits a path
    worst = tree.path_min(margin)  # [B, T]
    rank_key = torch.where(keep, float("inf"), worst).masked_fill(~tree.valid, float("-inf"))
    order = torch.sort(rank_key, dim=1, descending=True, stable=True).indices  # kept first, then the best cut
    rank = torch.empty_like(order).scatter_(1, order, torch.arange(T, device=order.device).expand(B, T))
    width = keep.sum(1).amax()  # a device scalar: no sync here (compact syncs the final width once)
    return (rank < width) & tree.valid


def compact(tree: TreeBatch, keep: Tensor, width: int | None = None) -> TreeBatch:
    """The sub-trees of the nodes where keep [B, T] bool is set (prefix-closed, roots set), renumbered in
    their original order (so still topological) and cut to the widest row, `width` nodes when the caller
    already has it on the host (it must equal ``keep.sum(1).max()``)."""
    B, T = tree.tokens.shape
    num_nodes = keep.sum(1)  # [B]
    if width is None:
        width = int(num_nodes.max())  # host sync, on purpose: the verifier's cost follows the padded width
    order = torch.sort((~keep).to(torch.int8), dim=1, stable=True).indices[:, :width]  # kept nodes first
    new_index = keep.cumsum(1) - 1  # [B, T]: each kept node's new number
    parents = tree.parents.gather(1, order)
    parents = torch.where(parents >= 0, new_index.gather(1, parents.clamp(min=0)), -1)
    logp = tree.logp.gather(1, order) if tree.logp is not None else None
    return TreeBatch(tree.tokens.gather(1, order), parents, num_nodes, logp, max_depth=tree.max_depth)


def _synced_clock(device: torch.device) -> float:
    """Host seconds after the device's queued work: the audit's own time, kept out of what a gate learns
    (a sync, on purpose: audited runs are diagnostics, never timed)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter()


class _ScorerRunner(DraftRunner):
    """A `DraftRunner` whose step is one forward over its backlog and a whole tree at once.

    A step without a forward (a gate skipped scoring) leaves the backlog pending: `commit` appends the
    step's accepted tokens to it, so the next forward catches up on every skipped step at once.
    """

    def forward_tree(self, tree: TreeBatch) -> Tensor:
        """Forward the backlog and the tree's non-root nodes; commit the backlog, drop the tree (at `commit`).

        Returns the final hidden state [B, T, d] at every tree node (node 0: the root, the backlog's last
        token). The backlog C [B, C] is ragged (n_b real tokens); tree nodes attend to the row's n_b backlog
        tokens and to their own non-root ancestors.
        """
        chain, cache = self.backlog_chain(), self.cache
        B, C = chain.tokens.shape
        T = tree.size
        n = chain.num_nodes  # [B]
        chain_bits = unpack_bits(chain.ancestor_mask, C)  # [B, C, C]
        tree_bits = unpack_bits(tree.ancestor_mask, T)[:, 1:, 1:]  # [B, T-1, T-1]: the root lives in the chain
        sees_chain = (torch.arange(C, device=n.device)[None, :] < n[:, None])[:, None, :] & tree.valid[:, 1:, None]
        bits = torch.cat([torch.cat([chain_bits, chain_bits.new_zeros(B, C, T - 1)], 2),
                          torch.cat([sees_chain, tree_bits], 2)], 1)  # [B, C + T - 1, C + T - 1]
        base = cache.positions()  # [B]: position of the chain's first token
        positions = torch.cat([chain.positions(base), tree.positions(base + n - 1)[:, 1:]], 1)
        tokens = self.vocab.ids(torch.cat([chain.tokens, tree.tokens[:, 1:]], 1))
        hidden = tree_forward(self.draft, cache, tokens, positions, pack_bits(bits), backend=self.backend,
                              hidden_states=True)  # [B, N, d]: K3 projects only the scored tokens
        cache.commit_prefix(n, self.backlog)
        self.backlog = np.zeros_like(self.backlog)
        root = hidden.gather(1, (n - 1)[:, None, None].expand(B, 1, hidden.shape[-1]))  # [B, 1, d]
        return torch.cat([root, hidden[:, C:]], 1)


class BranchScorer:
    """Scores every node and branch of a tree under `model` (a causal LM sharing the target's tokenizer).

    Life cycle (driven by `ValuSpecFilter`): `attach(target, supplier)`, `start(state, region)`, per step
    `scores(tree)` then `commit(acceptance)`. `reuse_draft_logp`: see the module docstring.
    """

    def __init__(self, model: PreTrainedModel, *, reuse_draft_logp: bool = True, backend: str = "auto"):
        if not isinstance(model, PreTrainedModel):
            raise ValueError(f"scorer: expected a Hugging Face causal LM, got {type(model).__name__}")
        head = model.get_output_embeddings()
        if head is None or not hasattr(head, "weight"):
            raise ValueError(f"scorer: {type(model).__name__} has no LM head")
        config = model.config.get_text_config()
        if getattr(config, "final_logit_softcapping", None) or getattr(config, "logit_scale", None):
            raise ValueError("scorer: models whose logits are not lm_head(hidden) (soft-capping, logit scale) are "
                             "not supported")
        self.model = model
        # A tensor-parallel scorer's LM head is sharded over the vocabulary: K3 needs all of it (gathered once)
        self._head_weight = full_weight(head.weight)  # [V, d]
        bias = getattr(head, "bias", None)
        self._head_bias = full_weight(bias) if bias is not None else None  # [V]
        self.reuse_draft_logp = reuse_draft_logp
        self.backend = backend
        self.runner = _ScorerRunner(model, backend)
        self._shared = self._head_weight.shape[0]  # rows scored; `attach` limits them to the target's ids
        self.reusing = False

    def attach(self, target: PreTrainedModel, supplier: Supplier | None = None) -> None:
        """A scorer with more or fewer embedding rows than the target (one tokenizer, different padding)
        scores over the ids both share: its softmax runs over those rows of its LM head only, and a token
        beyond them gets log-prob -inf (`specdec.vocab`)."""
        self.runner.attach(target)
        self._shared = self.runner.vocab.size
        runner = getattr(supplier, "runner", None)
        self.reusing = self.reuse_draft_logp and isinstance(runner, DraftRunner) and runner.draft is self.model

    def start(self, state: DecodeState, region: int) -> None:
        """Prefill the scorer's cache (skipped when reusing the draft's log-probs)."""
        if not self.reusing:
            self.runner.start(state, region)

    def commit(self, acc: Acceptance) -> None:
        if not self.reusing:
            self.runner.commit(acc)

    def node_logprobs(self, tree: TreeBatch) -> Tensor:
        """[B, T] float32: log-prob of each node's token given its path (root and padding: 0)."""
        B, T = tree.tokens.shape
        if T == 1 and self.reusing:  # a plain step of the draft's supplier: nothing to score (no scorer cache)
            return torch.zeros(B, 1, dtype=torch.float32, device=tree.device)
        parents = tree._parents.clamp(min=0)  # padding nodes point at the root; their values are ignored
        if self.reusing:
            if tree.logp is None:  # the scorer's own cache was never filled (start skips it): refuse, not misread
                raise ValueError("tree: carries no draft log-probs, and this scorer reuses them instead of "
                                 "running its own forward; construct it with reuse_draft_logp=False")
            logp = tree.logp - tree.logp.gather(1, parents)  # path log-probs -> per-token
            return torch.where(tree.valid & (tree._parents >= 0), logp, 0.0)
        hidden = self.runner.forward_tree(tree)  # [B, T, d]
        if T == 1:
            return torch.zeros(B, 1, dtype=torch.float32, device=tree.device)
        at_parent = hidden.gather(1, parents[:, 1:, None].expand(B, T - 1, hidden.shape[-1]))  # [B, T-1, d]
        targets = tree.tokens[:, 1:].reshape(-1)  # [N]
        known = self.runner.vocab.known(targets)  # ids the scorer shares with the target
        n = self._shared
        bias = None if self._head_bias is None else self._head_bias[:n]
        lp = ops.token_logprob(at_parent.reshape(B * (T - 1), -1), self._head_weight[:n], torch.where(known, targets, 0),
                               bias=bias, backend=self.backend)
        lp = torch.where(known, lp, float("-inf"))
        logp = torch.cat([torch.zeros(B, 1, dtype=torch.float32, device=tree.device), lp.view(B, T - 1)], 1)
        return torch.where(tree.valid, logp, 0.0)

    def scores(self, tree: TreeBatch) -> Tensor:
        """[B, T] float32: mean log-prob along each root-to-node path; a branch's score is at its leaf."""
        return ops.path_mean(self.node_logprobs(tree), tree.parents, tree.num_nodes, backend=self.backend)


class ValuSpecFilter(TreeFilter):
    """Keep the branches whose score reaches the calibrated threshold of their length; the root alone when
    none does.

    scorer: a causal LM or a `BranchScorer`. calibration: a `Calibration`.
    unit: "branch" (the paper's rule: a branch is kept whole or not at all) or "prefix" (see
    `keep_branches`: every node whose own path reaches the threshold of its depth qualifies, with its
    ancestors). length_aware: judge a path of d tokens by tau_d (True) or every path by the calibration's
    single tau (False: the paper's rule, `Calibration.tau`). ``unit="branch", length_aware=False`` is the
    paper's filter; the defaults are the configuration the measurements in docs/valuspec.md chose.
    audit: also run the target over the unfiltered tree (a second target cache, so twice the target's
    KV memory and one more target forward per step) to count false discards: row-steps where the target
    would have accepted more tokens of the unfiltered tree than of the kept one. Diagnostic only.
    gate: a `ScoringGate` deciding per step whether to score (None: every step, unless `cost_model`).
    cost_model: a `CostModel` or `Profile` of the pair (SMART's): the gate is then a `CostGate` over it.
    fill: after the threshold rule, fill each row back up to the padded width (`fill_to_width`).
    """

    def __init__(self, scorer: PreTrainedModel | BranchScorer, calibration: Calibration, *, unit: str = DEFAULT_UNIT,
                 length_aware: bool = DEFAULT_LENGTH_AWARE, audit: bool = False, gate: ScoringGate | None = None,
                 cost_model: CostModel | Profile | None = None, fill: bool = True):
        if not isinstance(calibration, Calibration):
            raise ValueError(f"calibration: expected a specdec Calibration, got {type(calibration).__name__}")
        if not isinstance(length_aware, bool):
            raise ValueError(f"length_aware: expected a bool, got {length_aware!r}")
        self._init(scorer, calibration.taus if length_aware else (calibration.tau,), audit, unit, gate, cost_model,
                   fill)
        self.calibration = calibration
        self.length_aware = length_aware

    def _init(self, scorer: PreTrainedModel | BranchScorer, taus: tuple[float, ...], audit: bool, unit: str,
              gate: ScoringGate | None, cost_model: CostModel | Profile | None, fill: bool) -> None:
        for name, value in (("audit", audit), ("fill", fill)):
            if not isinstance(value, bool):
                raise ValueError(f"{name}: expected a bool, got {value!r}")
        if unit not in ("branch", "prefix"):
            raise ValueError(f"unit: expected 'branch' or 'prefix', got {unit!r}")
        if gate is not None and not isinstance(gate, ScoringGate):
            raise ValueError(f"gate: expected a specdec ScoringGate, got {type(gate).__name__}")
        if gate is not None and cost_model is not None:
            raise ValueError("cost_model: pass a gate or a cost model (which makes a CostGate), not both")
        gate = CostGate(cost_model) if cost_model is not None else gate
        self.unit = unit
        self.scorer = scorer if isinstance(scorer, BranchScorer) else BranchScorer(scorer)
        self.taus = tuple(float(t) for t in taus)  # taus[d - 1]: the threshold of a d-token path; one: every length
        self.audit = audit
        self.gate = gate
        self.fill = fill
        self._auditor: _ScorerRunner | None = None
        self._counts: Tensor | None = None

    def attach(self, target: PreTrainedModel, supplier: Supplier) -> None:
        self.scorer.attach(target, supplier)
        self._max_tree = supplier.max_tree_size()
        if self.audit:
            install(target)
            self._auditor = _ScorerRunner(target, self.scorer.backend)

    def start(self, state: DecodeState) -> None:
        region = 2 * self._max_tree  # the catch-up chain (at most a tree's depth + 1) and the tree itself
        self.scorer.start(state, region)
        if self._auditor is not None:
            self._auditor.start(state, region)
        device = state.root.device
        self._taus = torch.tensor(self.taus, dtype=torch.float32, device=device)  # [L]
        self._counts = torch.zeros(len(_COUNTERS), dtype=torch.int64, device=device)
        self._unscored = 0  # host counts: the gate decides on the host, compact syncs the width
        self._whole: list[tuple[Tensor, Tensor, Tensor]] = []  # unscored steps not yet counted
        self._steps = dict.fromkeys(("steps", "steps_unscored", "width_proposed", "width_verified"), 0)
        self._plan, self._proposed = StepPlan(), 1
        if self.gate is not None:
            self.gate.start(state)

    def commit(self, acc: Acceptance) -> None:
        self.scorer.commit(acc)
        if self._auditor is not None:
            self._auditor.commit(acc)
        # finished rows were verified as their root alone: they accept nothing
        self._counts[_ACCEPTED] += acc.num_accepted.sum()

    def filter(self, tree: TreeBatch, state: DecodeState) -> TreeBatch:
        # A root-only tree (every row's supplier found nothing, or a planner's plain step) has nothing to
        # prune: no scorer forward (its cache catches up at the next one), no gate, not counted as skipped.
        plan = StepPlan(score=tree.size > 1)
        if self.gate is not None and tree.size > 1:
            plan = self.gate.plan(tree, state)
            if not plan.score:
                self._unscored += int((~state.finished).sum())  # host state: no sync
                self._steps["steps_unscored"] += 1
        active = state.active()
        predicted = None
        if plan.score:
            scores = self.scorer.scores(tree)
            keep = ruled = keep_branches(tree, scores, self._taus, self.unit)
            if self.fill:
                keep = ruled = fill_to_width(tree, keep, scores, self._taus)
            if self.gate is not None:
                keep, predicted = self.gate.size(tree, keep, scores, active)
        else:
            keep = ruled = None
        if keep is None and self._auditor is None:
            self._count_whole(tree, active)
        else:
            self._count(tree, keep, active)
        if self._auditor is not None:
            whole = tree.valid
            start = _synced_clock(tree.device)
            self._count_audit(tree, whole if keep is None else keep, whole if ruled is None else ruled, active)
            self._audit_seconds = _synced_clock(tree.device) - start
        width = None
        if predicted is not None:  # the compaction's one sync brings the gate's prediction along
            width, *expected, retained = torch.cat([keep.sum(1).amax().to(predicted.dtype).view(1), predicted]).tolist()
            plan = replace(plan, predicted=tuple(expected), retained=retained)
        out = compact(tree, keep, None if width is None else int(width)) if plan.score else tree
        self._plan, self._proposed = plan, tree.size
        self._steps["steps"] += 1
        self._steps["width_proposed"] += tree.size
        self._steps["width_verified"] += out.size
        return out

    def record_step(self, step: StepRecord) -> None:
        if self.gate is not None and self._proposed > 1:
            if self._auditor is not None:  # the gate prices the scoring, not the audit's target forward
                step = replace(step, filter=max(step.filter - self._audit_seconds, 0.0))
            self.gate.record(step, self._plan, self._proposed)

    def _count(self, tree: TreeBatch, keep: Tensor | None, active: Tensor) -> None:
        """Accumulate this step's counters on the device (no sync). keep None: the tree goes whole (an
        unscored step, where kept = proposed: half the ops, which at batch 1 on a CPU are about 2% of a step)."""
        cand, leaf = tree.valid[:, 1:], tree.leaves[:, 1:]  # [B, T - 1]: candidates and their leaves
        nodes, leaves = cand.sum(1), leaf.sum(1)  # [B] int64
        if keep is None:
            kept_nodes, kept_leaves, emptied = nodes, leaves, torch.zeros_like(nodes)
        else:
            kept = keep[:, 1:]
            kept_nodes, kept_leaves = (cand & kept).sum(1), (leaf & kept).sum(1)
            emptied = ((nodes > 0) & (kept_nodes == 0)).long()
        per_row = torch.stack([torch.ones_like(nodes), (nodes == 0).long(), emptied, leaves, kept_leaves, nodes,
                               kept_nodes])  # [7, B], in _COUNTERS order
        self._counts[:_ACCEPTED] += (per_row * active).sum(1)

    def _count_whole(self, tree: TreeBatch, active: Tensor) -> None:
        """Count an unscored step's tree later, with up to FOLD others in one pass: at batch 1 on a CPU the
        dozen small ops of `_count` were 1.5% of a step the gate had decided to leave alone. Its parent
        pointers are copied (padded to the supplier's widest tree), so a supplier reusing its buffers does
        not change what is counted."""
        T = self._max_tree
        if tree.size > T:
            self._count(tree, None, active)
            return
        parents = torch.nn.functional.pad(tree.parents, (0, T - tree.size))  # a copy; the padding is not valid
        self._whole.append((parents, tree.num_nodes.clone(), active))
        if len(self._whole) >= FOLD:
            self._fold()

    def _fold(self) -> None:
        if self._whole:
            parents, num_nodes, active = (torch.cat(parts) for parts in zip(*self._whole))
            self._whole = []
            self._count(TreeBatch(torch.zeros_like(parents), parents, num_nodes), None, active)

    def _count_audit(self, tree: TreeBatch, keep: Tensor, ruled: Tensor, active: Tensor) -> None:
        """Verify the unfiltered tree with the target's second cache; a false discard is a row whose
        accepted path there runs past the kept nodes, a rule discard one that runs past what the threshold
        rule kept (`ruled`, before a gate's sizing)."""
        hidden = self._auditor.forward_tree(tree)
        logits = self._auditor.draft.get_output_embeddings()(hidden)  # [B, T, V]: diagnostic, logits allowed
        _, full, node_index = greedy_accept(tree, logits)  # node_index [B, L]: the accepted path, root first
        on_path = node_index >= 0

        def lost(kept_nodes: Tensor) -> Tensor:  # [B]: accepted tokens the kept tree no longer holds
            kept = (kept_nodes.gather(1, node_index.clamp(min=0)) & on_path)[:, 1:]
            return torch.where(active, full - kept.to(torch.int64).cumprod(1).sum(1), 0)

        final, rule = lost(keep), lost(ruled)
        self._counts[_AUDIT:] += torch.stack([active.sum(), (final > 0).sum(), final.sum(), (rule > 0).sum()])

    def report(self) -> FilterStats | None:
        if self._counts is None:
            return None
        self._fold()
        counts = dict(zip(_COUNTERS, self._counts.tolist()))  # one sync per generate call
        return FilterStats(**counts, unscored=self._unscored, **self._steps)


class FixedThresholdFilter(ValuSpecFilter):
    """The paper's baseline: keep branches whose mean per-token probability (geometric mean) reaches a
    fixed cut-off, ``tau = log(probability)``, with no calibration. The paper sweeps 0.3 to 0.8."""

    def __init__(self, scorer: PreTrainedModel | BranchScorer, probability: float, *, audit: bool = False,
                 unit: str = "branch", gate: ScoringGate | None = None, cost_model: CostModel | Profile | None = None,
                 fill: bool = True):
        if isinstance(probability, bool) or not isinstance(probability, (int, float)) or not 0 < probability <= 1:
            raise ValueError(f"probability: expected a number in (0, 1], got {probability!r}")
        self._init(scorer, (math.log(probability),), audit, unit, gate, cost_model, fill)
        self.probability = float(probability)
        self.calibration = None
        self.length_aware = False
