"""Tree metadata (depth and ancestor bitmask) from parent pointers: Triton kernel.

Launcher, validation and the torch path: ``specdec.ops.tree_metadata``. One program per batch row walks
the nodes in order: since ``parents[i] < i``, a node's parent is final when the node is reached, so
``mask[i] = mask[parent[i]] | bit(i)`` and ``depth[i] = depth[parent[i]] + 1`` in one pass. The row's
whole result stays in registers ([BLOCK_T, BLOCK_W] words) and is stored once at the end.
"""

import triton
import triton.language as tl


@triton.jit
def _tree_metadata_kernel(
    parents_ptr, num_nodes_ptr, depth_ptr, mask_ptr,
    T, W,
    stride_pb, stride_pt,
    stride_db, stride_dt,
    stride_mb, stride_mt, stride_mw,
    BLOCK_T: tl.constexpr,
    BLOCK_W: tl.constexpr,
):
    """parents [B, T] int64, num_nodes [B] int64 -> depth [B, T] int64, mask [B, T, W] int32. Grid: (B,).

    Node i has a parent only if it is real (i < num_nodes[b]) and 0 <= parents[b, i] < i; otherwise
    (the root, padding nodes) it gets depth 0 and only its own bit.
    """
    b = tl.program_id(0).to(tl.int64)
    n = tl.load(num_nodes_ptr + b)
    nodes = tl.arange(0, BLOCK_T)
    words = tl.arange(0, BLOCK_W)
    depth = tl.zeros([BLOCK_T], tl.int64)
    mask = tl.zeros([BLOCK_T, BLOCK_W], tl.int32)
    for i in range(0, T):
        p = tl.load(parents_ptr + b * stride_pb + i * stride_pt)
        is_parent = (nodes == p) & (i < n) & (p >= 0) & (p < i)  # [BLOCK_T], at most one set
        parent_words = tl.sum(tl.where(is_parent[:, None], mask, 0), 0)  # [BLOCK_W]; zeros without a parent
        parent_depth = tl.sum(tl.where(is_parent, depth + 1, 0), 0)  # 0 without a parent
        own_bit = tl.where(words == i // 32, tl.full([BLOCK_W], 1, tl.int32) << (i % 32), 0)
        row = (parent_words | own_bit).to(tl.int32)
        mask = tl.where((nodes == i)[:, None], row[None, :], mask)
        depth = tl.where(nodes == i, parent_depth, depth)
    node_ok = nodes < T
    tl.store(depth_ptr + b * stride_db + nodes * stride_dt, depth, mask=node_ok)
    tl.store(mask_ptr + b * stride_mb + nodes[:, None] * stride_mt + words[None, :] * stride_mw, mask,
             mask=node_ok[:, None] & (words[None, :] < W))
