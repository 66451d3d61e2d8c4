"""K2, batched top-k expansion with the SMART marginal-ratio test: launcher and pure-torch reference.

One call grows every row's tree by one layer (docs/kernels.md, K2; docs/smart.md). The launcher checks shapes, dtypes
and devices (cheap, always), allocates and dispatches on ``backend``; the Triton kernels live in
``kernels/smart_expand.py``, the CUDA ones in ``csrc/smart_expand.cuh`` (``torch.ops.specdec.smart_expand``).

Cost model. ``cost`` is a float32 tensor [5] on the logits' device, ``(c0, lambda, gamma, delta, rho)``
(`COST_FIELDS`), the fitted coefficients of the step time of a tree of n nodes::

    C(n)  = c0 + lambda * n + gamma * (exp(delta * n^rho) - 1)          (C_draft + C_verify + intercept)
    dC(n) = lambda + gamma * delta * rho * n^(rho - 1) * exp(delta * n^rho)

Set c0 = 0 for the model without an intercept. The target's one-token time c_T cancels from both sides of
the test, so it is not an input.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from . import _cuda
from ._backend import kernel_module, resolve_backend

__all__ = ["Expansion", "COST_FIELDS", "smart_cost", "smart_expand", "smart_expand_ref"]

COST_FIELDS = ("c0", "lambda", "gamma", "delta", "rho")
BENEFITS = ("paper", "expected")
_FLOATS = (torch.float16, torch.bfloat16, torch.float32)
_INTS = (torch.int32, torch.int64)
# Vocabulary tile of the top-k kernel. 1024 fp16 logits per step keeps a 4-warp program busy on a GPU;
# under the CPU interpreter tests shrink it to cover several tiles with tiny vocabularies.
BLOCK_V = 1024
# The CUDA kernels' limits (csrc/smart_expand.cuh): children per slot, candidates per row.
_CUDA_MAX_K, _CUDA_MAX_CANDIDATES = 1024, 8192


@dataclass(frozen=True)
class Expansion:
    """One layer of candidates per row, sorted by path log-prob (descending; ties: lower candidate index).

    Candidate c = f * k + r is the rank-r child (r = 0 the likeliest; equal logits: lower token id first)
    of frontier slot f. Kept candidates form a prefix of each row.
    """

    tokens: Tensor  # [B, F*k] int64: child token ids; -1 for candidates of inactive frontier slots
    parent_slot: Tensor  # [B, F*k] int64: frontier slot 0..F-1 each candidate hangs from
    logp: Tensor  # [B, F*k] float32: path log-prob log P(u) (parent's + child's log-softmax); -inf inactive
    keep: Tensor  # [B, F*k] bool: the candidates that join the tree (a prefix of the row)
    tree_size: Tensor  # [B] int64: |T| after the kept candidates join
    expected_len: Tensor  # [B] float32: L after the kept candidates join


def smart_cost(cost: Tensor, n: Tensor) -> tuple[Tensor, Tensor]:
    """C(n) and dC(n) of the cost model `cost` [5] = (c0, lambda, gamma, delta, rho) at tree sizes `n` (float32).

    n^rho is computed as exp(rho * log n), the same operations the kernel uses.
    """
    c0, lam, gamma, delta, rho = cost.float().unbind()
    log_n = torch.log(n)
    grow = torch.exp(delta * torch.exp(rho * log_n))
    value = c0 + lam * n + gamma * (grow - 1.0)
    slope = lam + gamma * delta * rho * torch.exp((rho - 1.0) * log_n) * grow
    return value, slope


def smart_expand(
    logits: Tensor,
    frontier_logp: Tensor,
    tree_size: Tensor,
    expected_len: Tensor,
    num_paths: Tensor,
    cost: Tensor,
    *,
    k: int,
    alpha: float,
    budget: int,
    benefit: str = "paper",
    backend: str = "auto",
) -> Expansion:
    """Expand each row's frontier by its top-k children and keep the prefix that passes SMART's test.

    logits:        [B, F, V] fp16/bf16/fp32, draft logits at the F frontier slots of each row, any strides.
    frontier_logp: [B, F] float32, path log-prob of each frontier node; -inf marks an inactive slot,
                   whose logits are never read and whose candidates are never kept.
    tree_size:     [B] int32/int64, |T| before this layer, root included.
    expected_len:  [B] float32, L of the current tree: 1 (the bonus token) + sum of P over its non-root nodes.
    num_paths:     [B] int32/int64/float32, root-to-leaf paths (leaves) of the current tree, root alone = 1.
                   The paper's rule divides a candidate's benefit by it; it is held fixed for the layer.
    cost:          [5] float32, (c0, lambda, gamma, delta, rho): see the module docstring.
    k:             children per frontier node, 1 <= k <= V.
    alpha:         > 0, SMART's aggressiveness (the paper's default 0.8).
    budget:        >= 1, the most nodes a tree may reach, root included.
    benefit:       "paper": dL(u) = P(u) / num_paths; "expected": dL(u) = P(u).

    Candidates are sorted by P(u) descending; with |T|_j = tree_size + j and L_j = expected_len + the
    sum of P over candidates 0..j-1, candidate j joins iff its slot is active and
    ``alpha * dL(u_j) / dC(|T|_j) > L_j / C(|T|_j)`` and ``|T|_j + 1 <= budget``; the first failure
    ends the row. Everything stays on the device.

    Example: one row, root only (tree_size 1, L 1, num_paths 1), cost (1, 0.1, 0, 0, 1) so C(n) = 1 + 0.1 n
    and dC = 0.1, alpha 1, benefit "expected", children of the root with probabilities 0.5, 0.3, 0.15,
    0.05 (k = 4). j = 0: 0.5 / 0.1 = 5 > 1 / 1.1, joins; j = 1: 3 > 1.5 / 1.2, joins; j = 2: 1.5 > 1.8 /
    1.3, joins; j = 3: 0.5 < 1.95 / 1.4, stops. keep = [T, T, T, F], tree_size 4, expected_len 1.95.
    """
    _check(logits, frontier_logp, tree_size, expected_len, num_paths, cost, k=k, alpha=alpha, budget=budget,
           benefit=benefit)
    B, F, V = logits.shape
    limits = None if k <= _CUDA_MAX_K and F * k <= _CUDA_MAX_CANDIDATES else \
        f"handles k <= {_CUDA_MAX_K} and F * k <= {_CUDA_MAX_CANDIDATES}, got k {k}, F * k {F * k}"
    resolved = resolve_backend(backend, logits.device, cuda_unsupported=limits)
    if resolved == "torch":
        return smart_expand_ref(logits, frontier_logp, tree_size, expected_len, num_paths, cost, k=k, alpha=alpha,
                                budget=budget, benefit=benefit)
    if resolved == "cuda":
        return Expansion(*_cuda.ops().smart_expand(logits, frontier_logp, tree_size, expected_len, num_paths, cost,
                                                   k, float(alpha), budget, benefit == "paper"))
    kern = kernel_module("smart_expand")
    device = logits.device
    flogp = frontier_logp.contiguous()
    cand_tok = torch.empty(B, F * k, dtype=torch.int64, device=device)
    cand_logp = torch.empty(B, F * k, dtype=torch.float32, device=device)
    if B * F:
        kp = _next_pow2(k)
        kern._smart_expand_topk_kernel[(B * F,)](
            logits, flogp, cand_tok, cand_logp, F, V, *logits.stride(),
            K=k, KP=kp, BLOCK_V=min(BLOCK_V, max(_next_pow2(V), kp)), num_warps=4)
    out = Expansion(
        tokens=torch.empty(B, F * k, dtype=torch.int64, device=device),
        parent_slot=torch.empty(B, F * k, dtype=torch.int64, device=device),
        logp=torch.empty(B, F * k, dtype=torch.float32, device=device),
        keep=torch.empty(B, F * k, dtype=torch.bool, device=device),
        tree_size=torch.empty(B, dtype=torch.int64, device=device),
        expected_len=torch.empty(B, dtype=torch.float32, device=device),
    )
    if B:
        kern._smart_expand_select_kernel[(B,)](
            cand_tok, cand_logp, tree_size.contiguous(), expected_len.contiguous(),
            num_paths.to(torch.float32).contiguous(), cost.contiguous(),
            out.tokens, out.parent_slot, out.logp, out.keep, out.tree_size, out.expected_len,
            float(alpha), int(budget), F * k,
            K=k, FKP=_next_pow2(max(F * k, 1)), PAPER=benefit == "paper", num_warps=4)
    return out


def smart_expand_ref(
    logits: Tensor,
    frontier_logp: Tensor,
    tree_size: Tensor,
    expected_len: Tensor,
    num_paths: Tensor,
    cost: Tensor,
    *,
    k: int,
    alpha: float,
    budget: int,
    benefit: str = "paper",
) -> Expansion:
    """Pure-torch reference of `smart_expand` (same contract). Materialises an int64 key per logit."""
    B, F, V = logits.shape
    device = logits.device
    x = logits.float()
    children = _top_children(x, k)  # [B, F, k]: logit desc, token id asc
    child_logp = torch.log_softmax(x, dim=-1).gather(-1, children)  # [B, F, k]
    active = (frontier_logp != float("-inf"))[:, :, None]  # [B, F, 1]
    path = torch.where(active, frontier_logp[:, :, None] + child_logp, float("-inf")).reshape(B, F * k)
    tokens = torch.where(active, children, -1).reshape(B, F * k)

    order = torch.sort(path, dim=-1, descending=True, stable=True).indices  # ties: lower candidate index
    path = path.gather(1, order)
    prob = path.exp()
    tree_len = expected_len[:, None] + prob.cumsum(-1) - prob  # L_j
    n = (tree_size[:, None].to(torch.int64) + torch.arange(F * k, device=device)).float()  # |T|_j
    value, slope = smart_cost(cost, n)
    gain = prob / num_paths[:, None].float() if benefit == "paper" else prob
    ok = (path != float("-inf")) & (alpha * gain / slope > tree_len / value) & (n + 1.0 <= budget)
    keep = (~ok).cumsum(-1) == 0
    return Expansion(
        tokens=tokens.gather(1, order),
        parent_slot=order // k,
        logp=path,
        keep=keep,
        tree_size=tree_size.to(torch.int64) + keep.sum(-1),
        expected_len=expected_len + torch.where(keep, prob, 0.0).sum(-1),
    )


def _top_children(x: Tensor, k: int) -> Tensor:
    """[..., k] int64 indices of the k largest of x [..., V] float32, ordered by (x descending, index
    ascending), the order `_desc_key` defines.

    On a CPU a float top-(k + 1) finds the same set unless the k-th and (k + 1)-th values tie (then the keys
    decide, for every slot: reading that flag is a memory read there, no device sync); ties inside the set
    are put in index order by a stable sort of k values, and with no tie among the k + 1 largest (the usual
    case) topk's order is already the key order. Measured on a 2-core CPU, V = 4096, [16, 8] slots,
    k = 8: 0.5 ms against 9 ms for the int64 keys of every logit. Elsewhere (the reference on a GPU) the keys.
    """
    if x.device.type != "cpu" or k >= x.shape[-1]:
        return torch.topk(_desc_key(x), k, dim=-1).indices
    values, index = torch.topk(x, k + 1, dim=-1)
    if not bool((values[..., :-1] == values[..., 1:]).any()):  # no tie among the k + 1 largest (the usual
        return index[..., :k]  # case): topk's value order is the key order; no sorting (~30 us a layer on a CPU)
    if bool((values[..., k - 1] == values[..., k]).any()):  # a tie at the cut: only the keys know who is in
        return torch.topk(_desc_key(x), k, dim=-1).indices
    index, by_index = torch.sort(index[..., :k], dim=-1)
    order = torch.sort(values[..., :k].gather(-1, by_index), dim=-1, descending=True, stable=True).indices
    return index.gather(-1, order)


def _desc_key(x: Tensor) -> Tensor:
    """int64 keys [..., V] that sort like (x descending, index ascending), all distinct; x float32.

    High 32 bits: the fp32 bits mapped to a signed integer of the same order (-0.0 folded into +0.0).
    Low 32 bits: 0x7FFFFFFF - index. The Triton kernels build the same key.
    """
    bits = torch.where(x == 0, 0.0, x).view(torch.int32)
    ordered = torch.where(bits >= 0, bits, bits ^ 0x7FFFFFFF).to(torch.int64)
    index = torch.arange(x.shape[-1], device=x.device, dtype=torch.int64)
    return (ordered << 32) | (0x7FFFFFFF - index)


def _check(logits: Tensor, frontier_logp: Tensor, tree_size: Tensor, expected_len: Tensor, num_paths: Tensor,
           cost: Tensor, *, k: int, alpha: float, budget: int, benefit: str) -> None:
    """Shape, dtype, device and argument checks; no data is read."""
    if logits.ndim != 3:
        raise ValueError(f"logits: expected [B, F, V], got {tuple(logits.shape)}")
    if logits.dtype not in _FLOATS:
        raise TypeError(f"logits: expected fp16/bf16/fp32, got {logits.dtype}")
    B, F, V = logits.shape
    expected = {"frontier_logp": ((B, F), (torch.float32,)), "tree_size": ((B,), _INTS),
                "expected_len": ((B,), (torch.float32,)), "num_paths": ((B,), _INTS + (torch.float32,)),
                "cost": ((len(COST_FIELDS),), (torch.float32,))}
    tensors = {"frontier_logp": frontier_logp, "tree_size": tree_size, "expected_len": expected_len,
               "num_paths": num_paths, "cost": cost}
    for name, (shape, dtypes) in expected.items():
        t = tensors[name]
        if t.shape != shape:
            raise ValueError(f"{name}: expected shape {list(shape)}, got {tuple(t.shape)}")
        if t.dtype not in dtypes:
            raise TypeError(f"{name}: expected one of {[str(d) for d in dtypes]}, got {t.dtype}")
        if t.device != logits.device:
            raise ValueError(f"{name}: on {t.device}, logits on {logits.device}")
    if not isinstance(k, int) or not 1 <= k <= V:
        raise ValueError(f"k: expected an int in [1, V={V}], got {k!r}")
    if not isinstance(alpha, (int, float)) or not alpha > 0:
        raise ValueError(f"alpha: expected a number > 0, got {alpha!r}")
    if not isinstance(budget, int) or budget < 1:
        raise ValueError(f"budget: expected an int >= 1, got {budget!r}")
    if benefit not in BENEFITS:
        raise ValueError(f"benefit: {benefit!r} is not one of {BENEFITS}")


def _next_pow2(n: int) -> int:
    """Smallest power of two >= n (n >= 1), without importing triton."""
    return 1 << (n - 1).bit_length()

