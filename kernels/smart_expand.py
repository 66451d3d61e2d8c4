"""K2, SMART expansion: Triton kernels (launcher and contract: specdec/ops/smart_expand.py).

Two launches, both on the device, no host sync between them:

1. `_smart_expand_topk_kernel`, one program per (row, frontier slot): one pass over V in tiles keeping a
   running log-sum-exp and a running top-k, then the k children's tokens and path log-probs.
2. `_smart_expand_select_kernel`, one program per row: sort the F*k candidates by path log-prob, run the
   SMART marginal-ratio prefix test, write the sorted candidates, the keep mask and the new tree stats.

Ties are broken by a packed int64 key: the high 32 bits order like the fp32 value, the low 32 bits hold
0x7FFFFFFF - index, so among equal values the lower index ranks first and every key is unique.
"""

import triton
import triton.language as tl


@triton.jit
def _desc_key(x, idx):
    """int64 keys that sort like (x descending, idx ascending); x fp32, 0 <= idx < 2^31."""
    x = tl.where(x == 0.0, 0.0, x)  # -0.0 and +0.0 compare equal, so they must tie
    bits = x.to(tl.int32, bitcast=True)
    ordered = tl.where(bits >= 0, bits, bits ^ 0x7FFFFFFF)  # signed-int order == float order
    return (ordered.to(tl.int64) << 32) | (0x7FFFFFFF - idx).to(tl.int64)


@triton.jit
def _key_index(key):
    """The idx packed by `_desc_key` (its low 32 bits)."""
    return 0x7FFFFFFF - key.to(tl.int32)


@triton.jit
def _smart_expand_topk_kernel(
    x_ptr,  # [B, F, V] fp16/bf16/fp32 logits, any strides
    flogp_ptr,  # [B, F] float32, contiguous
    tok_ptr,  # [B, F, K] int64 out: children by rank; -1 for inactive slots
    clogp_ptr,  # [B, F, K] float32 out: path log-probs; -inf for inactive slots
    F,
    V,
    stride_xb,
    stride_xf,
    stride_xv,
    K: tl.constexpr,
    KP: tl.constexpr,  # next power of two >= K
    BLOCK_V: tl.constexpr,
):
    pid = tl.program_id(0).to(tl.int64)  # b * F + f
    row_ptr = x_ptr + (pid // F) * stride_xb + (pid % F) * stride_xf
    parent = tl.load(flogp_ptr + pid)
    active = parent != float("-inf")

    slots = tl.arange(0, KP)
    min_key = -9223372036854775807 - 1
    # Slots >= K hold +max so they are never the minimum, i.e. never replaced.
    best = tl.where(slots < K, min_key, 9223372036854775807).to(tl.int64)
    run_max = tl.full((), float("-inf"), tl.float32)
    run_sum = tl.full((), 0.0, tl.float32)
    n_tiles = tl.where(active, tl.cdiv(V, BLOCK_V), 0)  # inactive slots read nothing
    for t in range(0, n_tiles):
        offs = t * BLOCK_V + tl.arange(0, BLOCK_V)
        in_v = offs < V
        x = tl.load(row_ptr + offs.to(tl.int64) * stride_xv, mask=in_v, other=float("-inf")).to(tl.float32)
        new_max = tl.maximum(run_max, tl.max(x, 0))
        safe = tl.where(new_max == float("-inf"), 0.0, new_max)
        run_sum = run_sum * tl.exp(run_max - safe) + tl.sum(tl.exp(x - safe), 0)
        run_max = new_max
        keys = tl.where(in_v, _desc_key(x, offs), min_key)
        # Only keys above the current k-th best can enter, and past the first tiles there are few or none:
        # take that many, largest first, each replacing the smallest kept key while it is larger.
        n_new = tl.minimum(tl.sum((keys > tl.min(best, 0)).to(tl.int32), 0), K)
        for _ in range(0, n_new):
            top = tl.max(keys, 0)
            low = tl.min(best, 0)
            worst = tl.argmin(best, 0)
            best = tl.where((slots == worst) & (top > low), top, best)
            keys = tl.where(keys == top, min_key, keys)

    best = tl.sort(tl.where(slots < K, best, min_key), descending=True)
    token = _key_index(best)
    real = tl.where(active, slots < K, False)  # not `&`: the interpreter types scalar compares as fp32
    logit = tl.load(row_ptr + token.to(tl.int64) * stride_xv, mask=real, other=0.0).to(tl.float32)
    # run_sum >= 1 on an active slot (its maximum adds exp(0)); the guards keep inactive slots finite.
    lse = tl.where(active, run_max + tl.log(tl.maximum(run_sum, 1.0)), 0.0)
    path = tl.where(active, parent + (logit - lse), float("-inf"))
    out = pid * K + slots
    tl.store(tok_ptr + out, tl.where(active, token.to(tl.int64), -1), mask=slots < K)
    tl.store(clogp_ptr + out, path, mask=slots < K)


@triton.jit
def _smart_expand_select_kernel(
    tok_ptr,  # [B, F*K] int64 from the top-k kernel
    clogp_ptr,  # [B, F*K] float32 from the top-k kernel
    size_ptr,  # [B] int32/int64: |T| before this layer
    len_ptr,  # [B] float32: L of the current tree
    paths_ptr,  # [B] float32: num_paths
    cost_ptr,  # [5] float32: (c0, lambda, gamma, delta, rho)
    out_tok_ptr,  # [B, F*K] int64
    out_slot_ptr,  # [B, F*K] int64
    out_logp_ptr,  # [B, F*K] float32
    out_keep_ptr,  # [B, F*K] bool
    out_size_ptr,  # [B] int64
    out_len_ptr,  # [B] float32
    alpha,
    budget,
    FK,
    K: tl.constexpr,
    FKP: tl.constexpr,  # next power of two >= F*K
    PAPER: tl.constexpr,  # benefit rule: P / num_paths (True) or P (False)
):
    pid = tl.program_id(0).to(tl.int64)
    j = tl.arange(0, FKP)
    valid = j < FK
    row = pid * FK
    logp = tl.load(clogp_ptr + row + j, mask=valid, other=float("-inf"))
    keys = tl.where(valid, _desc_key(logp, j), -9223372036854775807 - 1)
    src = tl.where(valid, _key_index(tl.sort(keys, descending=True)), 0)  # candidate at sorted position j
    path = tl.load(clogp_ptr + row + src, mask=valid, other=float("-inf"))
    token = tl.load(tok_ptr + row + src, mask=valid, other=-1)

    size = tl.load(size_ptr + pid).to(tl.int64)
    length = tl.load(len_ptr + pid)
    c0 = tl.load(cost_ptr)
    lam = tl.load(cost_ptr + 1)
    gamma = tl.load(cost_ptr + 2)
    delta = tl.load(cost_ptr + 3)
    rho = tl.load(cost_ptr + 4)

    prob = tl.exp(path)
    tree_len = length + tl.cumsum(prob, 0) - prob  # L_j: the tree before candidate j joins
    n = (size + j).to(tl.float32)  # |T|_j
    log_n = tl.log(n)
    grow = tl.exp(delta * tl.exp(rho * log_n))
    cost_n = c0 + lam * n + gamma * (grow - 1.0)
    slope = lam + gamma * delta * rho * tl.exp((rho - 1.0) * log_n) * grow
    if PAPER:
        gain = prob / tl.load(paths_ptr + pid)
    else:
        gain = prob
    ok = valid & (path != float("-inf")) & (alpha * gain / slope > tree_len / cost_n) & (n + 1.0 <= budget)
    keep = tl.cumsum(tl.where(ok, 0, 1), 0) == 0  # the first failure stops the row

    tl.store(out_tok_ptr + row + j, token, mask=valid)
    tl.store(out_slot_ptr + row + j, (src // K).to(tl.int64), mask=valid)
    tl.store(out_logp_ptr + row + j, path, mask=valid)
    tl.store(out_keep_ptr + row + j, keep, mask=valid)
    tl.store(out_size_ptr + pid, size + tl.sum(keep.to(tl.int64), 0))
    tl.store(out_len_ptr + pid, length + tl.sum(tl.where(keep, prob, 0.0), 0))
