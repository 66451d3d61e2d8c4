"""K1, tree-mask attention: Triton kernels (launcher, contract and reference: ``specdec.ops.tree_attention``).

One program owns one tile of BLOCK_M query rows of one (batch row b, key/value head) pair. The rows are
the GROUP = Hq/Hkv query heads of that KV head packed with the T tree nodes, row r = t * GROUP + g, so
a prefix K/V tile is read once for all of them (once per row tile when GROUP * T > BLOCK_M). A program
walks two regions of the cache:

- the prefix ``[start, length)``: every query sees every slot, so the loop only bounds-checks;
- the tree region ``[length, length + 32 W)``: slot ``length + m`` is visible to node t iff bit m of
  ``tree_mask[b, t]`` is set. A tile whose bits are all zero for every row of the program is skipped
  before its K/V are loaded: for the usual ancestor mask (W = ceil(T/32)) those are the tiles above the
  diagonal. Within a tile only the slots some row sees are loaded.

No slot outside ``[start, length)`` and the visible tree slots is ever read.

With SPLIT, grid axis 2 splits the prefix into NUM_SPLITS chunks (the last split also takes the tree
region); each writes its normalised partial output and its log-sum-exp, and `_tree_attention_merge_kernel`
combines them. Softmax runs in base 2 (``scale`` arrives multiplied by log2(e)); accumulation is fp32.
"""

import triton
import triton.language as tl


@triton.jit
def _online_softmax_step(acc, m_i, l_i, s, v, DOT_PRECISION: tl.constexpr):
    """Fold one tile into the running acc [M, D], max m_i [M] and sum l_i [M].

    s [M, N]: base-2 scores, -inf where masked; v [N, D]: the tile's values.
    """
    m_new = tl.maximum(m_i, tl.max(s, 1))
    m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)  # a row with nothing visible yet stays at zero
    alpha = tl.exp2(m_i - m_safe)
    p = tl.exp2(s - m_safe[:, None])
    l_i = l_i * alpha + tl.sum(p, 1)
    acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=DOT_PRECISION)
    return acc, m_new, l_i


@triton.jit
def _tree_attention_kernel(
    q_ptr, k_ptr, v_ptr, start_ptr, length_ptr, mask_ptr, out_ptr, lse_ptr,
    scale,  # softmax scale times log2(e)
    T, S, W, D, HKV,
    stride_qb, stride_qh, stride_qt, stride_qd,
    stride_kb, stride_kh, stride_ks, stride_kd,
    stride_vb, stride_vh, stride_vs, stride_vd,
    stride_mb, stride_mt, stride_mw,
    stride_ob, stride_oh, stride_ot, stride_os, stride_od,
    stride_lb, stride_lh, stride_lt, stride_ls,
    GROUP: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_D: tl.constexpr,
    SPLIT: tl.constexpr,
    DOT_PRECISION: tl.constexpr,
):
    """q [B, Hq, T, D]; k, v [B, Hkv, S, D]; start, length [B]; mask [B, T, W] int32.

    SPLIT False: out [B, Hq, T, D] in q's dtype (stride_os unused), lse_ptr unused.
    SPLIT True:  out [B, Hq, T, NUM_SPLITS, D] fp32 normalised partials, lse [B, Hq, T, NUM_SPLITS] fp32
                 (base 2, -inf for a split that saw nothing).
    Grid: (cdiv(GROUP * T, BLOCK_M), B * Hkv, NUM_SPLITS).
    """
    WORDS: tl.constexpr = BLOCK_N // 32
    pid_m = tl.program_id(0)
    pid_bh = tl.program_id(1).to(tl.int64)
    split = tl.program_id(2)
    num_splits = tl.num_programs(2)
    b = pid_bh // HKV
    kvh = pid_bh % HKV

    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)  # [M]: row r is node r // GROUP, head kvh * GROUP + r % GROUP
    row_ok = rows < T * GROUP
    t = (rows // GROUP).to(tl.int64)  # t * stride_qt passes 2^31 for a prompt of 256k at Hq * D = 8192
    head = kvh * GROUP + rows % GROUP
    offs_d = tl.arange(0, BLOCK_D)
    d_ok = offs_d < D

    q_ptrs = q_ptr + b * stride_qb + head[:, None] * stride_qh + t[:, None] * stride_qt + offs_d[None, :] * stride_qd
    q = tl.load(q_ptrs, mask=row_ok[:, None] & d_ok[None, :], other=0.0)  # [M, Dp]
    k_base = k_ptr + b * stride_kb + kvh * stride_kh
    v_base = v_ptr + b * stride_vb + kvh * stride_vh

    start = tl.load(start_ptr + b).to(tl.int64)  # int64 slots: slot * stride_ks can pass 2^31 in long
    length = tl.load(length_ptr + b).to(tl.int64)  # caches with a [B, S, Hkv, D] layout
    prefix_end = tl.minimum(length, S)
    chunk = tl.cdiv(tl.cdiv(tl.maximum(prefix_end - start, 0), num_splits), BLOCK_N) * BLOCK_N
    lo = start + split * chunk
    hi = tl.minimum(lo + chunk, prefix_end)

    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)

    for n0 in range(lo, hi, BLOCK_N):
        cols = n0 + tl.arange(0, BLOCK_N)
        col_ok = cols < hi
        k = tl.load(k_base + cols[None, :] * stride_ks + offs_d[:, None] * stride_kd,
                    mask=col_ok[None, :] & d_ok[:, None], other=0.0)  # [Dp, N]
        s = tl.dot(q, k, input_precision=DOT_PRECISION) * scale
        s = tl.where(col_ok[None, :], s, float("-inf"))
        v = tl.load(v_base + cols[:, None] * stride_vs + offs_d[None, :] * stride_vd,
                    mask=col_ok[:, None] & d_ok[None, :], other=0.0)  # [N, Dp]
        acc, m_i, l_i = _online_softmax_step(acc, m_i, l_i, s, v, DOT_PRECISION)

    # The tree region belongs to the last split; bounded by the mask width and by the buffer.
    tree_end = tl.where(split == num_splits - 1, tl.minimum(32 * W, S - length), 0)
    mask_rows = mask_ptr + b * stride_mb + t * stride_mt  # [M]
    shifts = tl.arange(0, 32)
    for m0 in range(0, tree_end, BLOCK_N):
        word = m0 // 32 + tl.arange(0, WORDS)
        words = tl.load(mask_rows[:, None] + word[None, :] * stride_mw,
                        mask=row_ok[:, None] & (word[None, :] < W), other=0)  # [M, WORDS] int32
        if tl.max(tl.max((words != 0).to(tl.int32), 1), 0) > 0:  # skip tiles no query of this program sees
            bits = tl.reshape((words[:, :, None] >> shifts[None, None, :]) & 1, [BLOCK_M, BLOCK_N])
            cols = m0 + tl.arange(0, BLOCK_N)
            # Load only the slots some row sees: the others may hold unwritten memory, and 0 * NaN = NaN.
            col_ok = (cols < tree_end) & (tl.max(bits, 0) != 0)
            slots = length + cols
            k = tl.load(k_base + slots[None, :] * stride_ks + offs_d[:, None] * stride_kd,
                        mask=col_ok[None, :] & d_ok[:, None], other=0.0)
            s = tl.dot(q, k, input_precision=DOT_PRECISION) * scale
            s = tl.where((bits != 0) & col_ok[None, :], s, float("-inf"))
            v = tl.load(v_base + slots[:, None] * stride_vs + offs_d[None, :] * stride_vd,
                        mask=col_ok[:, None] & d_ok[None, :], other=0.0)
            acc, m_i, l_i = _online_softmax_step(acc, m_i, l_i, s, v, DOT_PRECISION)

    seen = l_i > 0.0
    o = acc / tl.where(seen, l_i, 1.0)[:, None]  # a row that saw nothing outputs zeros, like the reference
    out_ptrs = (out_ptr + b * stride_ob + head[:, None] * stride_oh + t[:, None] * stride_ot
                + split * stride_os + offs_d[None, :] * stride_od)
    tl.store(out_ptrs, o.to(out_ptr.dtype.element_ty), mask=row_ok[:, None] & d_ok[None, :])
    if SPLIT:
        lse = tl.where(seen, m_i + tl.log2(tl.where(seen, l_i, 1.0)), float("-inf"))
        tl.store(lse_ptr + b * stride_lb + head * stride_lh + t * stride_lt + split * stride_ls, lse, mask=row_ok)


@triton.jit
def _tree_attention_merge_kernel(
    part_ptr, lse_ptr, out_ptr,
    HQ, T, D, NUM_SPLITS,
    stride_pb, stride_ph, stride_pt, stride_ps, stride_pd,
    stride_lb, stride_lh, stride_lt, stride_ls,
    stride_ob, stride_oh, stride_ot, stride_od,
    BLOCK_SPLITS: tl.constexpr,
    BLOCK_D: tl.constexpr,
):
    """Merge the split partials of one query row by log-sum-exp.

    part [B, Hq, T, NUM_SPLITS, D] fp32, lse [B, Hq, T, NUM_SPLITS] fp32 (base 2) -> out [B, Hq, T, D].
    Grid: (B * Hq * T,).
    """
    pid = tl.program_id(0).to(tl.int64)
    t = pid % T
    h = (pid // T) % HQ
    b = pid // (T * HQ)
    offs_s = tl.arange(0, BLOCK_SPLITS)
    offs_d = tl.arange(0, BLOCK_D)
    s_ok = offs_s < NUM_SPLITS
    d_ok = offs_d < D

    lse = tl.load(lse_ptr + b * stride_lb + h * stride_lh + t * stride_lt + offs_s * stride_ls,
                  mask=s_ok, other=float("-inf"))  # [SPLITS]
    m = tl.max(lse, 0)
    weight = tl.exp2(lse - tl.where(m == float("-inf"), 0.0, m))  # 0 for splits that saw nothing
    part = tl.load(part_ptr + b * stride_pb + h * stride_ph + t * stride_pt + offs_s[:, None] * stride_ps
                   + offs_d[None, :] * stride_pd, mask=s_ok[:, None] & d_ok[None, :], other=0.0)  # [SPLITS, Dp]
    total = tl.sum(weight, 0)
    o = tl.sum(weight[:, None] * part, 0) / tl.where(total > 0.0, total, 1.0)
    tl.store(out_ptr + b * stride_ob + h * stride_oh + t * stride_ot + offs_d * stride_od,
             o.to(out_ptr.dtype.element_ty), mask=d_ok)
