"""The production torch path of tree attention (backend "sdpa"): SDPA over the live cache region, planned
once per forward, against the reference; the cache and tree shortcuts that keep plain decoding cheap."""

from __future__ import annotations


import numpy as np
import pytest
import torch

import specdec
from conftest import ARCHS, make_model, make_tree, perturbed, ragged_prompts
from specdec import ops
from specdec.cache import TreeCache
from specdec.ops._backend import resolve_backend
from specdec.tree import TreeBatch, pack_bits


def inputs(B, Hq, Hkv, T, D, prefix, seed):
    """fp64 q [B, Hq, T, D], k/v [B, Hkv, S, D]; ragged rows: start and length differ per row."""
    gen = torch.Generator().manual_seed(seed)
    length = torch.tensor([max(prefix - 3 * b, 0) for b in range(B)])
    start = torch.minimum(torch.tensor([0, 2, 5][:B]), length)
    S = prefix + T + 6  # free slots after the tree region
    q, k, v = (torch.randn(shape, generator=gen, dtype=torch.float64)
               for shape in ((B, Hq, T, D), (B, Hkv, S, D), (B, Hkv, S, D)))
    return q, k, v, start, length


def live_plan(start, length, mask, T):
    """The plan a forward makes: only the live slots (longest row + tree region), built once."""
    kv_len = int(length.max()) + T
    return ops.sdpa_plan(start, length, mask, kv_len, host_start=start.numpy(), host_length=length.numpy())


@pytest.mark.parametrize("T", [1, 7, 33, 130])
@pytest.mark.parametrize("prefix", [0, 1, 45])
@pytest.mark.parametrize("Hq, Hkv", [(2, 2), (4, 2), (4, 1)])
@pytest.mark.parametrize("kind", ["chain", "star", "random"])
def test_sdpa_matches_reference_fp32(T, prefix, Hq, Hkv, kind):
    B, D = 3, 16
    tree = make_tree(kind, B, T, seed=T + prefix)
    q, k, v, start, length = inputs(B, Hq, Hkv, T, D, prefix, seed=T * 7 + prefix)
    q, k, v = q.float(), k.float(), v.float()
    mask = tree.ancestor_mask
    want = ops.tree_attention(q, k, v, start, length, mask, backend="torch")
    whole = ops.tree_attention(q, k, v, start, length, mask, backend="sdpa")
    live = ops.tree_attention(q, k, v, start, length, mask, backend="sdpa", plan=live_plan(start, length, mask, T))
    torch.testing.assert_close(whole, want, atol=2e-6, rtol=2e-6)
    torch.testing.assert_close(live, want, atol=2e-6, rtol=2e-6)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("T, prefix, kind", [(1, 45, "chain"), (7, 0, "random"), (33, 45, "random"), (130, 1, "star")])
def test_sdpa_low_precision_within_twice_torch_error(dtype, T, prefix, kind):
    """docs/architecture.md's 2x rule: no worse than twice the error of the same computation done by torch in that dtype."""
    B, Hq, Hkv, D = 3, 4, 2, 32
    tree = make_tree(kind, B, T, seed=T)
    q64, k64, v64, start, length = inputs(B, Hq, Hkv, T, D, prefix, seed=T + 1)
    q, k, v = q64.to(dtype), k64.to(dtype), v64.to(dtype)
    mask = tree.ancestor_mask
    truth = ops.tree_attention_ref(q.double(), k.double(), v.double(), start, length, mask, scale=D**-0.5)
    torch_lp = ops.tree_attention_ref(q, k, v, start, length, mask, scale=D**-0.5, compute_dtype=dtype)
    ours = ops.tree_attention(q, k, v, start, length, mask, backend="sdpa", plan=live_plan(start, length, mask, T))
    assert ours.dtype == dtype and ours.shape == q.shape
    err_ours = (ours.double() - truth).abs().max().item()
    err_torch = (torch_lp.double() - truth).abs().max().item()
    assert err_ours <= 2 * err_torch, (err_ours, err_torch)


def test_live_region_never_reads_free_slots():
    B, H, T, D, P = 2, 2, 5, 8, 6
    tree = make_tree("random", B, T, seed=3)
    q, k, v, start, length = (t.float() if t.is_floating_point() else t for t in inputs(B, H, H, T, D, P, seed=0))
    plan = live_plan(start, length, tree.ancestor_mask, T)
    out = ops.tree_attention(q, k, v, start, length, tree.ancestor_mask, backend="sdpa", plan=plan)
    k[:, :, plan.kv_len:] = float("nan")
    v[:, :, plan.kv_len:] = float("nan")
    again = ops.tree_attention(q, k, v, start, length, tree.ancestor_mask, backend="sdpa", plan=plan)
    assert torch.equal(out, again)


def test_no_mask_for_root_only_steps_and_unpadded_prompts():
    B, Hq, Hkv, D = 3, 4, 2, 8
    gen = torch.Generator().manual_seed(0)
    k, v = torch.randn(B, Hkv, 40, D, generator=gen), torch.randn(B, Hkv, 40, D, generator=gen)
    zeros, host0 = torch.zeros(B, dtype=torch.int64), np.zeros(B, dtype=np.int64)
    # root-only step over equal, unpadded rows: every live slot is visible
    length = torch.full((B,), 11)
    root = torch.ones(B, 1, 1, dtype=torch.int32)
    plan = ops.sdpa_plan(zeros, length, root, 12, host_start=host0, host_length=length.numpy())
    assert plan.mask is None and plan.causal_rows == 0
    q = torch.randn(B, Hq, 1, D, generator=gen)
    torch.testing.assert_close(ops.tree_attention(q, k, v, zeros, length, root, backend="sdpa", plan=plan),
                               ops.tree_attention(q, k, v, zeros, length, root, backend="torch"), atol=2e-6, rtol=2e-6)
    # an unpadded prompt block into empty rows: causal, no mask
    P = 9
    chain = specdec.tree.prefill_mask(zeros, P)
    plan = ops.sdpa_plan(zeros, zeros, chain, P, host_start=host0, host_length=host0, causal_rows=P)
    assert plan.mask is None and plan.causal_rows == P
    q = torch.randn(B, Hq, P, D, generator=gen)
    torch.testing.assert_close(ops.tree_attention(q, k, v, zeros, zeros, chain, backend="sdpa", plan=plan),
                               ops.tree_attention(q, k, v, zeros, zeros, chain, backend="torch"), atol=2e-6, rtol=2e-6)
    # padding, ragged lengths or a tree: a mask
    assert ops.sdpa_plan(torch.tensor([0, 2, 0]), length, root, 12, host_start=np.array([0, 2, 0]),
                         host_length=length.numpy()).mask is not None
    ragged = torch.tensor([11, 10, 11])
    assert ops.sdpa_plan(zeros, ragged, root, 12, host_start=host0, host_length=ragged.numpy()).mask is not None
    tree = make_tree("star", B, 4, seed=0).ancestor_mask
    assert ops.sdpa_plan(zeros, length, tree, 15, host_start=host0, host_length=length.numpy()).mask is not None


@pytest.mark.parametrize("plan, match", [
    (ops.SdpaPlan(13, None), "plan: kv_len 13 outside"),
    (ops.SdpaPlan(8, torch.ones(2, 1, 5, 7, dtype=torch.bool)), r"plan: mask expected \[2, 1, 5, 8\] bool"),
    (ops.SdpaPlan(8, None, causal_rows=5), "plan: an all-causal plan needs kv_len == T"),
    (ops.SdpaPlan(8, None, causal_rows=6), "plan: causal_rows 6 outside 0..5"),
    (ops.SdpaPlan(5, torch.ones(2, 1, 5, 5, dtype=torch.bool), causal_rows=2), r"plan: mask expected \[2, 1, 3, 5\]"),
])
def test_bad_plans(plan, match):
    with pytest.raises(ValueError, match=match):
        ops.tree_attention(torch.randn(2, 4, 5, 8), torch.randn(2, 2, 12, 8), torch.randn(2, 2, 12, 8),
                           torch.zeros(2, dtype=torch.int64), torch.full((2,), 3),
                           torch.ones(2, 5, 1, dtype=torch.int32), backend="sdpa", plan=plan)


def test_backend_resolution():
    cpu = torch.device("cpu")
    assert resolve_backend("auto", cpu, fast_torch="sdpa") == "sdpa"  # tree attention off the GPU
    assert resolve_backend("auto", cpu) == "torch"  # ops with no fast torch path
    with pytest.raises(ValueError, match="backend: 'sdpa' is tree attention's fast path"):
        ops.path_mean(torch.zeros(1, 2), torch.tensor([[-1, 0]]), torch.tensor([2]), backend="sdpa")


def test_cache_writes_and_commits_take_shortcuts_with_the_same_result():
    """Equal lengths write by slice, ragged ones by scatter; a kept prefix commits without moving K/V."""
    B, H, D, T = 2, 2, 4, 3
    new = torch.randn(B, H, T, D)

    def written(lengths):
        cache = TreeCache(1, B, H, D, 16, dtype=torch.float32, device="cpu")
        cache.commit_prefix(torch.tensor(lengths), np.array(lengths))
        cache.reserve(T)
        cache.update(new, -new, 0)
        cache.advance(T)
        return cache

    for lengths in ([4, 4], [4, 6]):
        cache = written(lengths)
        for b, n in enumerate(lengths):
            assert torch.equal(cache.layers[0].keys[b, :, n:n + T], new[b])
            assert torch.equal(cache.layers[0].values[b, :, n:n + T], -new[b])
    index, count = torch.tensor([[0, 1, -1], [0, 1, 2]]), torch.tensor([2, 3])
    fast, slow = written([4, 6]), written([4, 6])
    fast.commit(index, count, count.numpy(), index.numpy())
    slow.commit(index, count, count.numpy())
    assert fast.host_length.tolist() == slow.host_length.tolist() == [6, 9]
    for b, n in enumerate(fast.host_length):  # committed slots agree (the slow path also scribbles on free ones)
        assert torch.equal(fast.layers[0].keys[b, :, :n], slow.layers[0].keys[b, :, :n])
    moved, ref = written([4, 4]), written([4, 4])
    jump = torch.tensor([[0, 2], [0, 1]])  # row 0 keeps node 2 after the root: K/V must move
    moved.commit(jump, torch.tensor([2, 2]), np.array([2, 2]), jump.numpy())
    assert torch.equal(moved.layers[0].keys[0, :, 5], new[0, :, 2])
    assert torch.equal(moved.layers[0].keys[1, :, 5], ref.layers[0].keys[1, :, 5])


@pytest.mark.parametrize("T", [1, 6, 33, 70])
def test_chain_constructor_matches_general_derivations(T):
    tokens = torch.randint(0, 50, (3, T))
    num_nodes = torch.tensor([T, max(1, T // 2), 1])
    chain = TreeBatch.chain(tokens, num_nodes)
    general = TreeBatch(tokens, (torch.arange(T) - 1).expand(3, T).contiguous(), num_nodes)
    assert torch.equal(chain.depth, general._depth_torch())
    assert torch.equal(chain.ancestor_mask, general._ancestor_mask_torch())
    assert torch.equal(chain.paths, general.paths) and chain.max_depth == T - 1
    chain.validate()


def test_root_only_tree_metadata():
    tree = TreeBatch(torch.tensor([[5], [7]]), torch.full((2, 1), -1), torch.ones(2, dtype=torch.int64))
    assert torch.equal(tree.depth, torch.zeros(2, 1, dtype=torch.int64))
    assert torch.equal(tree.ancestor_mask, pack_bits(torch.ones(2, 1, 1, dtype=torch.bool)))


@pytest.mark.hf
@pytest.mark.parametrize("arch", sorted(ARCHS))
@pytest.mark.parametrize("backend", ["torch", "sdpa"])
def test_identity_with_backend_forced(arch, backend):
    """The identity grid's two shapes (plain decoding, a draft tree) on a ragged batch, each backend forced."""
    target = make_model(arch)
    ids, mask = ragged_prompts([5, 11, 8])
    ref = target.generate(ids, attention_mask=mask, max_new_tokens=16, do_sample=False, pad_token_id=0)
    for supplier in (specdec.ARSupplier(),
                     specdec.DraftSupplier(perturbed(target), mode="tree", depth=4, topk=3, total_tokens=10,
                                           backend=backend)):
        gen = specdec.SpeculativeGenerator(target, supplier, backend=backend)
        out = gen.generate(ids, attention_mask=mask, max_new_tokens=16, pad_token_id=0)  # the model's EOS applies to both
        assert torch.equal(out.sequences, ref), f"{arch}/{backend}/{type(supplier).__name__}"


@pytest.mark.parametrize("padded", [False, True])
@pytest.mark.parametrize("T", [1, 5])
def test_prompt_rides_the_first_verification(padded, T):
    """verify(prompt=...) equals prefill then verify: the same acceptance, the same committed K/V."""
    target = make_model("llama")
    ids, mask = ragged_prompts([9, 6] if padded else [9, 9])
    start = (mask == 0).sum(1)
    shape = make_tree("random", 2, T, seed=T)  # rooted at each prompt's last token; distinct tokens
    tokens = torch.cat([ids[:, -1:], torch.arange(10, 9 + T).expand(2, T - 1)], 1)
    tree = TreeBatch.from_parents(tokens, shape.parents, shape.num_nodes)
    results = []
    for fused in (True, False):
        verifier = specdec.TreeVerifier(target)
        cache = verifier.new_cache(2, 40)
        prompt = specdec.verify.PromptBlock(ids[:, :-1], start)
        if fused:
            acc = verifier.verify(tree, cache, prompt=prompt)
        else:
            verifier.prefill(cache, *prompt)
            acc = verifier.verify(tree, cache)
        results.append((acc, cache))
    (a, ca), (b, cb) = results
    assert torch.equal(a.tokens, b.tokens) and torch.equal(a.node_index, b.node_index)
    assert ca.host_length.tolist() == cb.host_length.tolist() and torch.equal(ca.length, cb.length)
    for la, lb in zip(ca.layers, cb.layers):
        for b_, n in enumerate(ca.host_length):
            s = int(start[b_])
            torch.testing.assert_close(la.keys[b_, :, s:n], lb.keys[b_, :, s:n], atol=1e-5, rtol=1e-5)


def test_prompt_block_and_tree_plan_is_causal_then_masked():
    """An unpadded prompt block with a tree: the block runs causally with no mask, the tree rows masked."""
    B, Hq, Hkv, D, P, T = 2, 4, 2, 8, 6, 4
    gen = torch.Generator().manual_seed(0)
    zeros, host0 = torch.zeros(B, dtype=torch.int64), np.zeros(B, dtype=np.int64)
    tree = make_tree("random", B, T, seed=2)
    mask = specdec.tree.prompt_tree_mask(zeros, P, tree.ancestor_mask)
    plan = ops.sdpa_plan(zeros, zeros, mask, P + T, host_start=host0, host_length=host0, causal_rows=P)
    assert plan.causal_rows == P and plan.mask.shape == (B, 1, T, P + T)
    q = torch.randn(B, Hq, P + T, D, generator=gen)
    k, v = torch.randn(B, Hkv, P + T + 3, D, generator=gen), torch.randn(B, Hkv, P + T + 3, D, generator=gen)
    torch.testing.assert_close(ops.tree_attention(q, k, v, zeros, zeros, mask, backend="sdpa", plan=plan),
                               ops.tree_attention(q, k, v, zeros, zeros, mask, backend="torch"), atol=2e-6, rtol=2e-6)
    # a padded row, or a block that does not start at slot 0, gets the dense mask
    assert ops.sdpa_plan(zeros, zeros, mask, P + T, host_start=np.array([0, 1]), host_length=host0,
                         causal_rows=P).causal_rows == 0
    assert ops.sdpa_plan(zeros, zeros, mask, P + T + 1, host_start=host0, host_length=host0,
                         causal_rows=P).causal_rows == 0


def test_prompt_tree_mask_worked_example():
    root_child = TreeBatch.from_parents([[5, 6]], [[-1, 0]]).ancestor_mask
    mask = specdec.tree.prompt_tree_mask(torch.tensor([1]), 2, root_child)
    assert mask[0, :, 0].tolist() == [0b0001, 0b0010, 0b0110, 0b1110]


def test_prompt_block_errors():
    target = make_model("llama")
    verifier = specdec.TreeVerifier(target)
    cache = verifier.new_cache(1, 20)
    tree = TreeBatch.from_parents([[5]], [[-1]])
    with pytest.raises(ValueError, match=r"prompt: input_ids: expected a \[1, P\] tensor"):
        verifier.verify(tree, cache, prompt=specdec.verify.PromptBlock(torch.zeros(2, 3, dtype=torch.int64),
                                                                      torch.zeros(1, dtype=torch.int64)))
    verifier.verify(tree, cache)
    with pytest.raises(ValueError, match="cache: a prompt block needs an empty cache"):
        verifier.verify(tree, cache, prompt=specdec.verify.PromptBlock(torch.zeros(1, 3, dtype=torch.int64),
                                                                      torch.zeros(1, dtype=torch.int64)))
