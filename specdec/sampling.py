"""Lossless sampling on trees: the target's warped distribution and the two acceptance rules.

`Sampling` holds temperature, top-k and top-p and turns logits into the distribution transformers'
``generate(do_sample=True)`` samples from: its own warpers (`TemperatureLogitsWarper`, `TopKLogitsWarper`,
`TopPLogitsWarper`), in its order, in float32. Temperature 0 is greedy and bypasses all of this.

The acceptance rules (the verifier picks one per tree; both emit exactly the target's distribution):

* **Deterministic candidate sets** (a tree with ``draft_probs`` None: top-k draft trees, SMART, retrieval,
  prompt lookup, filtered trees). At the current node u with target distribution p: try u's children in
  node order, accept child c with probability p(c); on rejection set p(c) = 0, renormalise, try the next
  sibling; when all are rejected the bonus token is drawn from what remains. That sequence is one draw
  y ~ p told one question at a time ("is it c1? else is it c2? ..."), so it is implemented as that draw:
  one sample y_i ~ p_i at every node at once (an exponential race: no host sync), then the path of
  nodes whose token equals the sample at their parent, exactly as greedy verification follows the argmax.
  Lossless for any candidate set chosen without the verifier's random numbers.
* **Sampled candidates** (``draft_probs`` [B, T, V]: node i's children were drawn one after another from
  the draft distribution q_i without replacement, in node order). Recursive rejection sampling, the
  without-replacement variant of SpecInfer's rule (Sequoia, Chen et al. 2024): accept child c with
  probability min(1, p(c) / q(c)); on rejection p <- normalise(max(p - q, 0)), q(c) <- 0 and q <-
  normalise(q), try the next sibling; when all are rejected the bonus is drawn from p as it stands. One
  round is speculative sampling's lemma (output ~ p for x ~ q); q renormalised without the tried tokens is
  the next sibling's law given the earlier ones, so by induction over siblings and depth the output is the
  target's. A supplier must therefore never choose a sampled child by looking at its own value (a
  pruned or filtered tree drops ``draft_probs`` and falls back to the deterministic rule). When q's
  support is exhausted (every token q allows was tried and rejected; a warped q with top-k/top-p can allow
  fewer tokens than a node has children), the remaining siblings are a candidate set fixed before any
  draw and get the deterministic rule: accept with p(c), else p(c) <- 0. That is the recursive rule with
  q one-hot on c, so the output law is unchanged; without it a sibling of q-probability 0 would be
  accepted whenever p(c) > 0.

Worked example (deterministic rule), one row: root r with children a (node 1) and b (node 2), a with
child c (node 3); samples y = [a, c, z, w] at nodes [0, 1, 2, 3]: a matches y_0, c matches y_1 -> the
accepted path is r, a, c and the bonus is y_3 = w (tokens [a, c, w], num_accepted 2).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor
from transformers.generation.logits_process import TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper

from .ops.tree_metadata import detached_parents_host
from .tree import TreeBatch, pack_bits, unpack_bits

__all__ = ["Sampling", "GREEDY", "sample", "sample_without_replacement", "check_generator", "accept_predicted",
           "path_acceptance", "sample_accept"]


@dataclass(frozen=True)
class Sampling:
    """What the target samples from. temperature 0: greedy (top_k, top_p ignored).

    top_k: None (off) or an int >= 1; top_p: None (off) or a number in (0, 1]. Bad values raise
    ValueError naming the argument.
    """

    temperature: float = 0.0
    top_k: int | None = None
    top_p: float | None = None

    def __post_init__(self) -> None:
        t = self.temperature
        if isinstance(t, bool) or not isinstance(t, (int, float)) or not math.isfinite(t) or t < 0:
            raise ValueError(f"temperature: expected a finite number >= 0, got {t!r}")
        if self.top_k is not None and (isinstance(self.top_k, bool) or not isinstance(self.top_k, int) or self.top_k < 1):
            raise ValueError(f"top_k: expected None or an int >= 1, got {self.top_k!r}")
        p = self.top_p
        if p is not None and (isinstance(p, bool) or not isinstance(p, (int, float)) or not 0 < p <= 1):
            raise ValueError(f"top_p: expected None or a number in (0, 1], got {p!r}")
        object.__setattr__(self, "temperature", float(t))

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0

    def probs(self, logits: Tensor) -> Tensor:
        """[..., V] logits (any float dtype) -> [..., V] float32 probabilities after the warpers.

        The warpers are transformers' own, applied as its sampling applies them (temperature unless 1,
        top-k, top-p unless 1) to float32 logits, so a row's distribution is the one ``generate`` samples.
        """
        if self.greedy:
            raise ValueError("temperature: 0 is greedy decoding; there is no distribution to sample")
        shape = logits.shape
        scores = logits.reshape(-1, shape[-1]).float()
        if self.temperature != 1.0:
            scores = TemperatureLogitsWarper(self.temperature)(None, scores)
        if self.top_k is not None:
            scores = TopKLogitsWarper(self.top_k)(None, scores)
        if self.top_p is not None and self.top_p < 1.0:
            scores = TopPLogitsWarper(self.top_p)(None, scores)
        return torch.softmax(scores, dim=-1).view(shape)


GREEDY = Sampling()


def check_generator(generator: torch.Generator | None, device: torch.device) -> None:
    """ValueError unless `generator` is None or a torch.Generator on `device`."""
    if generator is None:
        return
    if not isinstance(generator, torch.Generator):
        raise ValueError(f"generator: expected a torch.Generator or None, got {type(generator).__name__}")
    if torch.device(generator.device).type != device.type or (
            device.type != "cpu" and torch.device(generator.device).index not in (None, device.index)):
        raise ValueError(f"generator: on {generator.device}, the target on {device}")


def sample(probs: Tensor, generator: torch.Generator | None = None) -> Tensor:
    """One token per row of `probs` [..., V] (float, rows sum to 1) -> [...] int64, without a host sync.

    An exponential race: argmax(p / E) with E ~ Exp(1) i.i.d. picks token v with probability p(v)
    (gpt-fast's `multinomial_sample_one_no_sync`). E is clamped away from 0 so that a zero-probability
    token scores 0, never NaN, and is never picked.
    """
    race = torch.empty_like(probs, dtype=torch.float32).exponential_(1.0, generator=generator)
    return (probs.float() / race.clamp_min(torch.finfo(torch.float32).tiny)).argmax(-1)


def sample_without_replacement(probs: Tensor, k: int, generator: torch.Generator | None = None) -> Tensor:
    """k distinct tokens per row of `probs` [..., V] (float, rows sum to 1) -> [..., k] int64 in draw
    order, without a host sync; k <= V.

    Gumbel-top-k (Kool et al. 2019): the k largest keys log p(v) + G_v, G i.i.d. Gumbel(0, 1) (G = -log E,
    E ~ Exp(1), the exponential race of `sample`), in decreasing order, are distributed exactly as k
    draws one after another, each from p renormalised over the tokens not drawn yet. The first column is
    `sample`'s draw for the same noise. Tokens of probability 0 get key -inf and come only after every
    token of positive probability (in an order fixed by the index, not by the noise).
    """
    race = torch.empty_like(probs, dtype=torch.float32).exponential_(1.0, generator=generator)
    keys = probs.float().log() - race.clamp_min(torch.finfo(torch.float32).tiny).log()
    return keys.topk(k, dim=-1).indices


def path_acceptance(tree: TreeBatch, best: Tensor, bonus: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """The accepted path to node `best` [B] int64 and the bonus token [B] int64 after it.

    Returns (tokens [B, L], num_accepted [B], node_index [B, L]), L = tree.depth_bound + 1: the path's
    tokens below the root then the bonus, -1 padded; num_accepted = depth of `best`; node_index the path's
    nodes, root first, -1 padded. Shared by greedy and sampled verification; no host sync.
    """
    B, T = tree.tokens.shape
    depth, anc = tree.depth, tree.ancestor_mask  # [B, T], [B, T, W]
    num_accepted = depth.gather(1, best[:, None])[:, 0]
    L = tree.depth_bound + 1
    on_path = unpack_bits(anc.gather(1, best[:, None, None].expand(B, 1, anc.shape[2]))[:, 0], T)  # [B, T]
    node_index = torch.full((B, L + 1), -1, dtype=torch.int64, device=tree.device)
    column = torch.where(on_path, depth, L)  # off-path nodes land in a scratch column
    node_index.scatter_(1, column, torch.arange(T, device=tree.device).expand(B, T).contiguous())
    node_index = node_index[:, :L]
    cols = torch.arange(L, device=tree.device)[None, :]
    nxt = torch.cat([node_index[:, 1:], node_index.new_full((B, 1), -1)], 1)
    tokens = torch.where(nxt >= 0, tree.tokens.gather(1, nxt.clamp(min=0)), -1)
    tokens = torch.where(cols == num_accepted[:, None], bonus[:, None], tokens)
    return tokens, num_accepted, node_index


def accept_predicted(tree: TreeBatch, pred: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Deepest node whose whole path matches `pred`, then the bonus ``pred[best]``.

    pred: [B, T] int64, the target's token at every node (its argmax, or one sample per node). Node i
    (i > 0) matches iff ``tokens[i] == pred[parents[i]]``; siblings carry distinct tokens, so the matching
    nodes form one chain from the root. Returns `path_acceptance`'s triple.
    """
    B, T = tree.tokens.shape
    if T == 1:  # root-only trees (plain decoding): the bonus token alone, in three small ops
        zeros = torch.zeros((B, 1), dtype=torch.int64, device=tree.device)
        return pred[:, :1], zeros[:, 0], zeros
    if tree.device.type == "cpu":
        return _accept_predicted_host(tree, pred)
    return _accept_predicted_torch(tree, pred)


def _accept_predicted_torch(tree: TreeBatch, pred: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """`accept_predicted` in torch ops on the tree's device (no host sync)."""
    parents = tree._parents
    correct = (tree.tokens == pred.gather(1, parents.clamp(min=0))) | (parents < 0)
    wrong = pack_bits(~correct & tree.valid)  # [B, W]
    path_ok = ((tree.ancestor_mask & wrong[:, None, :]) == 0).all(-1) & tree.valid
    best = torch.where(path_ok, tree.depth, -1).argmax(1)  # [B]
    return path_acceptance(tree, best, pred.gather(1, best[:, None])[:, 0])


def _accept_predicted_host(tree: TreeBatch, pred: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """`accept_predicted` for a tree on the CPU, in numpy: the same steps (agreeing nodes, the deepest
    node whose ancestors all agree, its path) on arrays that share the tensors' memory: the torch version's
    ~40 small ops cost ~300 us inside the loop for an 8-node tree at batch 1 on the 2-core CPU, this ~60 us."""
    tokens, anc, depth = tree.tokens.numpy(), tree.ancestor_mask.numpy().view(np.uint32), tree.depth.numpy()
    B, T = tokens.shape
    idx = np.arange(T)
    valid = idx[None, :] < tree.num_nodes.numpy()[:, None]
    parents = detached_parents_host(tree.parents, tree.num_nodes)  # as `TreeBatch._parents`
    rows = np.arange(B)[:, None]
    predicted = pred.numpy()
    correct = (tokens == predicted[rows, np.maximum(parents, 0)]) | (parents < 0)
    W = anc.shape[2]
    wrong = np.zeros((B, 32 * W), dtype=bool)
    wrong[:, :T] = ~correct & valid
    wrong = np.packbits(wrong, axis=1, bitorder="little").view("<u4")  # [B, W], the `bits` layout
    path_ok = ((anc & wrong[:, None, :]) == 0).all(-1) & valid
    best = np.where(path_ok, depth, -1).argmax(1)  # [B]
    num_accepted = depth[rows[:, 0], best]
    L = tree.depth_bound + 1
    on_path = np.unpackbits(anc[rows[:, 0], best].view(np.uint8), axis=1, bitorder="little")[:, :T].astype(bool)
    node_index = np.full((B, L + 1), -1, dtype=np.int64)
    node_index[rows, np.where(on_path, depth, L)] = idx  # off-path nodes land in a scratch column
    node_index = node_index[:, :L]
    nxt = np.concatenate([node_index[:, 1:], np.full((B, 1), -1, dtype=np.int64)], 1)
    out = np.where(nxt >= 0, tokens[rows, np.maximum(nxt, 0)], -1)
    bonus = predicted[rows[:, 0], best]
    out = np.where(np.arange(L)[None, :] == num_accepted[:, None], bonus[:, None], out)
    return torch.from_numpy(out), torch.from_numpy(num_accepted), torch.from_numpy(node_index.copy())


def sample_accept(tree: TreeBatch, logits: Tensor, sampling: Sampling,
                  generator: torch.Generator | None = None) -> tuple[Tensor, Tensor, Tensor]:
    """Lossless tree rejection sampling (module docstring): `path_acceptance`'s triple, no host sync.

    logits: [B, T, V] target logits at every node. The rule follows the tree: ``tree.draft_probs`` None
    -> the deterministic rule; else the recursive rule with q = ``draft_probs``.
    """
    p = sampling.probs(logits)  # [B, T, V] float32
    if tree.draft_probs is None:
        return accept_predicted(tree, sample(p, generator))
    return _recursive_accept(tree, p, tree.draft_probs.float(), generator)


def _normalise(x: Tensor) -> Tensor:
    return x / x.sum(-1, keepdim=True).clamp_min(torch.finfo(torch.float32).tiny)


def _recursive_accept(tree: TreeBatch, p: Tensor, q: Tensor,
                      generator: torch.Generator | None) -> tuple[Tensor, Tensor, Tensor]:
    """The recursive rule over nodes in index order: a child of the current node is tried when its turn
    comes (children come after their parent, siblings in node order), so one pass over the T nodes
    walks every row's path. p, q: [B, T, V] float32 target and draft distributions at every node."""
    B, T, V = p.shape
    cur = torch.zeros(B, dtype=torch.int64, device=p.device)  # each row's current node
    resid, draft = p[:, 0].clone(), q[:, 0].clone()  # [B, V]: the target's residual, the draft's remaining law
    coins = torch.rand(B, T, generator=generator, device=p.device)  # one uniform per node
    parents = tree._parents  # padding: -1, never the current node
    for i in range(1, T):
        tok = tree.tokens[:, i:i + 1]  # [B, 1]
        tried = parents[:, i] == cur
        px, qx = resid.gather(1, tok)[:, 0], draft.gather(1, tok)[:, 0]
        exhausted = draft.sum(-1) == 0  # [B]: q's support all tried; this sibling gets the deterministic rule
        qx = torch.where(exhausted, 1.0, qx)
        accept = tried & (coins[:, i] * qx < px)  # probability min(1, px / qx)
        reject = (tried & ~accept)[:, None]
        rest = torch.where(exhausted[:, None], resid.scatter(1, tok, 0.0), (resid - draft).clamp_min(0.0))
        resid = torch.where(reject, _normalise(rest), resid)
        draft = torch.where(reject, _normalise(draft.scatter(1, tok, 0.0)), draft)
        resid = torch.where(accept[:, None], p[:, i], resid)
        draft = torch.where(accept[:, None], q[:, i], draft)
        cur = torch.where(accept, i, cur)
    return path_acceptance(tree, cur, sample(resid, generator))
