"""K3, ValuSpec scoring: Triton kernels (launchers and contracts: specdec/ops/logprob.py).

token_logprob never writes the [N, V] logits. The vocabulary is cut into S contiguous splits; program
(row block, split) streams its split's tiles through a running max / sum-of-exponentials and writes one
partial (max, sumexp, target logit) per row to [S, N] buffers. `_logprob_merge_kernel` then folds the S
partials of each row in split order 0..S-1, so the result does not depend on scheduling.
"""

import triton
import triton.language as tl


@triton.jit
def _online_lse(run_max, run_sum, x):
    """Fold logits x [BLOCK_N, BLOCK_V] (-inf where absent) into the per-row running (max, sumexp)."""
    new_max = tl.maximum(run_max, tl.max(x, 1))
    safe = tl.where(new_max == float("-inf"), 0.0, new_max)
    run_sum = run_sum * tl.exp(run_max - safe) + tl.sum(tl.exp(x - safe[:, None]), 1)
    return new_max, run_sum


@triton.jit
def _token_logprob_kernel(
    h_ptr,  # [N, D] fp16/bf16/fp32 hidden states
    w_ptr,  # [V, D] same dtype, LM head
    b_ptr,  # [V] bias (read when HAS_BIAS)
    t_ptr,  # [N] int64 targets
    max_ptr,  # [S, N] float32 out: per-split max logit
    sum_ptr,  # [S, N] float32 out: per-split sum of exp(logit - max)
    tgt_ptr,  # [S, N] float32 out: target logit if it lies in the split, else 0
    N,
    V,
    D,
    stride_hn,
    stride_hd,
    stride_wv,
    stride_wd,
    TILES_PER_SPLIT,
    HAS_BIAS: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_V: tl.constexpr,
    BLOCK_D: tl.constexpr,
    DOT_PRECISION: tl.constexpr,  # "ieee" for fp32 inputs: no tf32 rounding
):
    pid_n = tl.program_id(0).to(tl.int64)
    split = tl.program_id(1)
    rows = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    in_n = rows < N
    target = tl.load(t_ptr + rows, mask=in_n, other=-1)
    run_max = tl.full([BLOCK_N], float("-inf"), tl.float32)
    run_sum = tl.zeros([BLOCK_N], tl.float32)
    tgt = tl.zeros([BLOCK_N], tl.float32)
    first = split * TILES_PER_SPLIT
    last = tl.minimum(first + TILES_PER_SPLIT, tl.cdiv(V, BLOCK_V))
    for tile in range(first, last):
        cols = tile * BLOCK_V + tl.arange(0, BLOCK_V).to(tl.int64)
        in_v = cols < V
        acc = tl.zeros([BLOCK_N, BLOCK_V], tl.float32)
        for d0 in range(0, D, BLOCK_D):
            dd = d0 + tl.arange(0, BLOCK_D)
            in_d = dd < D
            h = tl.load(h_ptr + rows[:, None] * stride_hn + dd[None, :] * stride_hd,
                        mask=in_n[:, None] & in_d[None, :], other=0.0)
            w = tl.load(w_ptr + cols[None, :] * stride_wv + dd[:, None] * stride_wd,
                        mask=in_v[None, :] & in_d[:, None], other=0.0)
            acc = tl.dot(h, w, acc, input_precision=DOT_PRECISION)
        if HAS_BIAS:
            acc += tl.load(b_ptr + cols, mask=in_v, other=0.0).to(tl.float32)[None, :]
        acc = tl.where(in_v[None, :], acc, float("-inf"))
        tgt += tl.sum(tl.where(cols[None, :] == target[:, None], acc, 0.0), 1)
        run_max, run_sum = _online_lse(run_max, run_sum, acc)
    out = split * N + rows
    tl.store(max_ptr + out, run_max, mask=in_n)
    tl.store(sum_ptr + out, run_sum, mask=in_n)
    tl.store(tgt_ptr + out, tgt, mask=in_n)


@triton.jit
def _logits_logprob_kernel(
    x_ptr,  # [N, V] fp16/bf16/fp32 logits, any strides
    t_ptr,  # [N] int64 targets
    max_ptr,  # [S, N] float32 out, as in _token_logprob_kernel
    sum_ptr,
    tgt_ptr,
    N,
    V,
    stride_xn,
    stride_xv,
    TILES_PER_SPLIT,
    BLOCK_V: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    split = tl.program_id(1)
    target = tl.load(t_ptr + row + tl.arange(0, 1))
    run_max = tl.full([1], float("-inf"), tl.float32)
    run_sum = tl.zeros([1], tl.float32)
    tgt = tl.zeros([1], tl.float32)
    first = split * TILES_PER_SPLIT
    last = tl.minimum(first + TILES_PER_SPLIT, tl.cdiv(V, BLOCK_V))
    for tile in range(first, last):
        cols = tile * BLOCK_V + tl.arange(0, BLOCK_V).to(tl.int64)
        x = tl.load(x_ptr + row * stride_xn + cols[None, :] * stride_xv, mask=cols[None, :] < V,
                    other=float("-inf")).to(tl.float32)
        tgt += tl.sum(tl.where(cols[None, :] == target[:, None], x, 0.0), 1)
        run_max, run_sum = _online_lse(run_max, run_sum, x)
    out = split * N + row + tl.arange(0, 1)
    tl.store(max_ptr + out, run_max)
    tl.store(sum_ptr + out, run_sum)
    tl.store(tgt_ptr + out, tgt)


@triton.jit
def _logprob_merge_kernel(
    max_ptr,  # [S, N] float32 partials
    sum_ptr,
    tgt_ptr,
    out_ptr,  # [N] float32 out: target logit - log-sum-exp
    N,
    S,
    BLOCK_N: tl.constexpr,
):
    rows = tl.program_id(0).to(tl.int64) * BLOCK_N + tl.arange(0, BLOCK_N)
    in_n = rows < N
    row_max = tl.full([BLOCK_N], float("-inf"), tl.float32)
    for s in range(0, S):
        row_max = tl.maximum(row_max, tl.load(max_ptr + s * N + rows, mask=in_n, other=float("-inf")))
    safe = tl.where(row_max == float("-inf"), 0.0, row_max)
    total = tl.zeros([BLOCK_N], tl.float32)
    tgt = tl.zeros([BLOCK_N], tl.float32)
    for s in range(0, S):  # fixed order: deterministic
        part_max = tl.load(max_ptr + s * N + rows, mask=in_n, other=float("-inf"))
        total += tl.load(sum_ptr + s * N + rows, mask=in_n, other=0.0) * tl.exp(part_max - safe)
        tgt += tl.load(tgt_ptr + s * N + rows, mask=in_n, other=0.0)
    # total >= 1 for every real row (the split holding the maximum adds at least exp(0)); the floor only
    # keeps masked rows finite.
    tl.store(out_ptr + rows, tgt - (row_max + tl.log(tl.maximum(total, 1.0))), mask=in_n)


@triton.jit
def _path_mean_kernel(
    logp_ptr,  # [B, T] float32
    par_ptr,  # [B, T] int32/int64 parents, -1 for the root
    nodes_ptr,  # [B] int32/int64 real nodes per row
    out_ptr,  # [B, T] float32 out, contiguous
    T,
    stride_lb,
    stride_lt,
    stride_pb,
    stride_pt,
    BLOCK_T: tl.constexpr,
    ROUNDS: tl.constexpr,  # ceil(log2(T)), at least 1: enough doublings for the deepest chain
):
    b = tl.program_id(0).to(tl.int64)
    i = tl.arange(0, BLOCK_T)
    num_nodes = tl.load(nodes_ptr + b)
    scored = (i > 0) & (i < T) & (i < num_nodes)  # real non-root nodes
    parent = tl.load(par_ptr + b * stride_pb + i * stride_pt, mask=scored, other=-1).to(tl.int32)
    jump = tl.where(scored & (parent < i), parent, -1)
    total = tl.where(scored, tl.load(logp_ptr + b * stride_lb + i * stride_lt, mask=scored, other=0.0), 0.0)
    count = scored.to(tl.int32)
    # Pointer jumping: after round r, total / count cover a node's 2^r nearest path nodes (root excluded).
    for _ in tl.static_range(ROUNDS):
        has = jump >= 0
        safe = tl.where(has, jump, 0)
        total = total + tl.where(has, tl.gather(total, safe, 0), 0.0)
        count = count + tl.where(has, tl.gather(count, safe, 0), 0)
        jump = tl.where(has, tl.gather(jump, safe, 0), -1)
    mean = tl.where(count > 0, total / tl.maximum(count, 1).to(tl.float32), 0.0)
    tl.store(out_ptr + b * T + i, mean, mask=i < T)
