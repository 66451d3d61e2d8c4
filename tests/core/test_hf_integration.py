"""The attention hook and the tree cache on unmodified Hugging Face models (run on 5.17 and 5.24 in CI)."""

from __future__ import annotations

import copy

import pytest
import torch

from specdec import TreeBatch, TreeVerifier
from specdec.attention import _cache_keyword, install, tree_forward
from tests.helpers import ARCHS, make_model, ragged_prompts

pytestmark = pytest.mark.hf


@pytest.mark.parametrize("arch", sorted(ARCHS))
@pytest.mark.parametrize("impl", ["sdpa", "eager"])
def test_hook_is_inert_outside_tree_forwards(arch, impl):
    plain = make_model(arch, attn_implementation=impl)
    hooked = copy.deepcopy(plain)
    install(hooked)
    assert hooked.config._attn_implementation == "specdec_" + impl
    ids, mask = ragged_prompts([4, 9])
    assert torch.equal(hooked(ids, attention_mask=mask).logits, plain(ids, attention_mask=mask).logits)
    kwargs = dict(attention_mask=mask, max_new_tokens=6, do_sample=False, pad_token_id=0)
    assert torch.equal(hooked.generate(ids, **kwargs), plain.generate(ids, **kwargs))


def full_logits(model, rows: list[list[int]]) -> list[torch.Tensor]:
    """Logits of the last token of each unpadded sequence, by a plain forward (no cache, no hook)."""
    return [model(torch.tensor([r])).logits[0, -1] for r in rows]


@pytest.mark.parametrize("arch", sorted(ARCHS))
def test_tree_logits_equal_per_path_recompute(arch):
    model = make_model(arch)
    plain = copy.deepcopy(model)
    ids, mask = ragged_prompts([5, 8])
    verifier = TreeVerifier(model)
    cache = verifier.new_cache(2, 64)
    start = (mask == 0).sum(1)
    verifier.prefill(cache, ids[:, :-1], start)
    tree = TreeBatch.from_parents([[ids[0, -1], 11, 12, 13, 14, 15], [ids[1, -1], 21, 22, 23, 0, 0]],
                                  [[-1, 0, 0, 1, 1, 3], [-1, 0, 1, 0, 0, 0]], [6, 4])
    logits = tree_forward(model, cache, tree.tokens, tree.positions(cache.positions()), tree.ancestor_mask)
    for b in range(2):
        prompt = ids[b, int(start[b]):].tolist()
        for i in range(int(tree.num_nodes[b])):
            path = [int(tree.tokens[b, m]) for m in range(i + 1) if (tree.ancestor_mask[b, i, 0] >> m) & 1][1:]
            want = full_logits(plain, [prompt + path])[0]
            torch.testing.assert_close(logits[b, i], want, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("arch", sorted(ARCHS))
def test_after_commit_next_logits_equal_full_recompute(arch):
    model = make_model(arch)
    plain = copy.deepcopy(model)
    ids, mask = ragged_prompts([6, 9, 4], seed=2)
    start = (mask == 0).sum(1)
    verifier = TreeVerifier(model)
    cache = verifier.new_cache(3, 64)
    verifier.prefill(cache, ids[:, :-1], start)
    seqs = [ids[b, int(start[b]):].tolist() for b in range(3)]
    root = ids[:, -1]
    for _ in range(4):
        # a tree whose first child is the target's own greedy choice (accepted), plus a decoy branch
        greedy = torch.stack([row.argmax() for row in full_logits(plain, seqs)])
        tree = TreeBatch.from_parents(torch.stack([root, greedy, (greedy + 1) % 96, (greedy + 2) % 96], 1),
                                      [[-1, 0, 0, 1]] * 3)
        acc = verifier.verify(tree, cache)
        assert acc.num_accepted.min() >= 1
        for b in range(3):
            seqs[b] += acc.host_tokens[b, : acc.host_num_accepted[b] + 1].tolist()
        root = acc.tokens.gather(1, acc.num_accepted[:, None])[:, 0]
        assert cache.host_length.tolist() == [len(s) - 1 + int(start[b]) for b, s in enumerate(seqs)]
        assert torch.equal(cache.length, torch.from_numpy(cache.host_length))
    # the cache now holds exactly the accepted sequences: a root-only step gives the recomputed logits
    root_tree = TreeBatch.from_parents(root[:, None], [[-1]] * 3)
    logits = tree_forward(model, cache, root_tree.tokens, root_tree.positions(cache.positions()),
                          root_tree.ancestor_mask)
    for b, want in enumerate(full_logits(plain, seqs)):
        torch.testing.assert_close(logits[b, 0], want, atol=1e-4, rtol=1e-4)


def test_drop_in_with_medusa_style_buffers():
    """A pipeline with its own tree buffers: dense ancestor mask + candidate tokens -> TreeBatch -> verify."""
    target = make_model("llama")
    plain = copy.deepcopy(target)
    prompt = torch.tensor([[5, 9, 14, 3, 22]])
    g = plain.generate(prompt, max_new_tokens=3, do_sample=False, pad_token_id=0)[0, 5:].tolist()
    medusa_mask = torch.tensor([[1, 0, 0, 0, 0],
                                [1, 1, 0, 0, 0],
                                [1, 0, 1, 0, 0],
                                [1, 1, 0, 1, 0],
                                [1, 1, 0, 0, 1]], dtype=torch.float32)[None, None]
    candidates = torch.tensor([[22, g[0], (g[0] + 1) % 96, g[1], (g[1] + 1) % 96]])
    verifier = TreeVerifier(target)
    cache = verifier.new_cache(1, 32)
    verifier.prefill(cache, prompt[:, :-1], torch.zeros(1, dtype=torch.int64))
    acc = verifier.verify(TreeBatch.from_ancestor_mask(candidates, medusa_mask), cache)
    assert acc.num_accepted.tolist() == [2]
    assert acc.tokens.tolist() == [[g[0], g[1], g[2]]]
    assert acc.node_index.tolist() == [[0, 1, 3]]


@pytest.mark.parametrize("arch", ["llama", "qwen3"])
def test_drop_in_with_the_pipelines_own_dynamic_cache(arch):
    """A batch-1 pipeline keeping a DynamicCache: verify prunes it to the accepted path each step."""
    from transformers import DynamicCache

    target = make_model(arch)
    plain = copy.deepcopy(target)
    prompt = torch.tensor([[5, 9, 14, 3, 22, 7]])
    want = plain.generate(prompt, max_new_tokens=12, do_sample=False, pad_token_id=0)[0, 6:].tolist()
    verifier = TreeVerifier(target)
    cache = DynamicCache(config=target.config)
    target(prompt[:, :-1], use_cache=True, **{_cache_keyword(target): cache})  # the pipeline's own prefill
    out, root = [], int(prompt[0, -1])
    while len(out) < 12:
        guess = want[len(out):len(out) + 2]  # the right next tokens, then a wrong sibling branch
        tokens = [root] + guess + [(guess[0] + 1) % 96]
        parents = [-1] + list(range(len(guess))) + [0]
        acc = verifier.verify(TreeBatch.from_parents([tokens], [parents]), cache)
        out += acc.host_tokens[0, : acc.host_num_accepted[0] + 1].tolist()
        root = out[-1]
        assert cache.get_seq_length() == 5 + len(out)
    assert out[:12] == want


def test_dynamic_cache_needs_batch_one():
    from transformers import DynamicCache

    target = make_model("llama")
    with pytest.raises(ValueError, match="tree: batch of 2 rows, the cache holds 1 .a DynamicCache"):
        TreeVerifier(target).verify(TreeBatch.from_parents([[4], [5]], [[-1], [-1]]), DynamicCache(config=target.config))
