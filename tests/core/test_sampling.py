"""Lossless sampling on trees, tested the four ways (docs/architecture.md): exact results on one-hot distributions,
structural invariants, seeded determinism, and the distribution of the first two generated tokens
against the target's exact distribution for every supplier kind, with top-k/top-p and with filters on."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy.stats import chisquare
from transformers import GenerationConfig

import specdec
from specdec.sampling import Sampling, accept_predicted, check_generator, sample, sample_accept
from specdec.state import DecodeState
from specdec.tree import TreeBatch
from specdec.valuspec import compact
from specdec.verify import greedy_accept
from tests.helpers import (SAMPLE_ROWS, TINY_PROMPT, WARPS, assert_matches, draw_two_tokens, exact_two_tokens,
                           make_model, make_tree, tiny_pair)

# ------------------------------------------------------------------------------------------- the warpers
@pytest.mark.parametrize("s", WARPS, ids=str)
def test_probs_are_transformers_sampling_distribution(s):
    """Sampling.probs equals softmax of the processors transformers' generate(do_sample=True) builds."""
    model = make_model("llama")
    config = GenerationConfig(do_sample=True, temperature=s.temperature, top_k=s.top_k or 0, top_p=s.top_p or 1.0)
    processors = model._get_logits_processor(config)
    logits = torch.randn(7, 96, generator=torch.Generator().manual_seed(0)) * 3
    want = torch.softmax(processors(None, logits.clone()), -1)
    assert torch.equal(s.probs(logits), want)
    assert int((want > 0).sum(-1).max()) <= (s.top_k or 96)


def test_top_p_keeps_the_smallest_set_reaching_p():
    probs = torch.tensor([[0.5, 0.3, 0.15, 0.05]])
    assert Sampling(1.0, top_p=0.8).probs(probs.log()).gt(0).tolist() == [[True, True, False, False]]
    assert Sampling(1.0, top_p=0.81).probs(probs.log()).gt(0).tolist() == [[True, True, True, False]]
    assert Sampling(1.0, top_p=0.1).probs(probs.log()).gt(0).sum() == 1  # at least one token


def test_sample_draws_the_distribution_and_never_a_zero():
    probs = torch.tensor([0.0, 0.1, 0.6, 0.0, 0.3]).expand(200_000, 5)
    draws = sample(probs, torch.Generator().manual_seed(0))
    counts = torch.bincount(draws, minlength=5).numpy()
    assert counts[0] == counts[3] == 0
    assert chisquare(counts[[1, 2, 4]], 200_000 * np.array([0.1, 0.6, 0.3])).pvalue > 1e-3


# ------------------------------------------------------------------------------------ argument checking
@pytest.mark.parametrize("kw, message", [
    (dict(temperature=-1.0), "temperature: expected a finite number >= 0"),
    (dict(temperature=float("nan")), "temperature: expected a finite number >= 0"),
    (dict(temperature="1"), "temperature: expected a finite number >= 0"),
    (dict(temperature=True), "temperature: expected a finite number >= 0"),
    (dict(temperature=1.0, top_k=0), "top_k: expected None or an int >= 1"),
    (dict(temperature=1.0, top_k=2.5), "top_k: expected None or an int >= 1"),
    (dict(temperature=1.0, top_p=0.0), r"top_p: expected None or a number in \(0, 1\]"),
    (dict(temperature=1.0, top_p=1.5), r"top_p: expected None or a number in \(0, 1\]"),
    (dict(temperature=1.0, generator="seed"), "generator: expected a torch.Generator or None"),
])
def test_bad_arguments(kw, message):
    target = make_model("llama")
    gen = specdec.SpeculativeGenerator(target, specdec.ARSupplier())
    ids = torch.tensor([[5, 6, 7]])
    with pytest.raises(ValueError, match=message):
        gen.generate(ids, max_new_tokens=2, **kw)
    with pytest.raises(ValueError, match=message):
        specdec.TreeVerifier(target, **kw)


def test_generator_on_another_device():
    with pytest.raises(ValueError, match="generator: on cpu, the target on cuda:0"):
        check_generator(torch.Generator(), torch.device("cuda", 0))
    with pytest.raises(ValueError, match="temperature: 0 is greedy decoding"):
        Sampling().probs(torch.zeros(2, 4))


def test_verify_takes_each_calls_sampling_and_holds_none():
    """A verifier keeps no call's sampling state: `verify(..., sampling=, generator=)` samples with that
    call's settings (seeded: the same tokens twice), a plain `verify` keeps the verifier's own (greedy)."""
    target = make_model("llama")
    verifier = specdec.TreeVerifier(target)
    tree = make_tree("random", 2, 7, seed=0)

    def run(**kw) -> torch.Tensor:
        cache = verifier.new_cache(2, 16)
        verifier.prefill(cache, torch.tensor([[5, 6], [7, 8]]), torch.zeros(2, dtype=torch.int64))
        return verifier.verify(tree, cache, **kw).tokens

    greedy = run()
    hot = Sampling(50.0)  # nearly uniform: the sampled tokens are not greedy's
    first = run(sampling=hot, generator=torch.Generator().manual_seed(1))
    assert torch.equal(first, run(sampling=hot, generator=torch.Generator().manual_seed(1)))
    assert not torch.equal(first, greedy)
    assert torch.equal(run(), greedy) and verifier.sampling.greedy and verifier.generator is None
    with pytest.raises(ValueError, match="sampling: expected a specdec Sampling"):
        run(sampling=0.7)
    with pytest.raises(ValueError, match="generator: expected a torch.Generator or None"):
        run(sampling=hot, generator="seed")


def test_draft_probs_shape_is_checked():
    tree = make_tree("chain", 2, 4, seed=0)
    with pytest.raises(ValueError, match=r"draft_probs: expected \[B, T, V\] float"):
        TreeBatch(tree.tokens, tree.parents, tree.num_nodes, draft_probs=torch.zeros(2, 3, 8)).check_shapes()


def test_filtered_trees_drop_draft_probs_and_masked_rows_keep_them():
    tree = make_tree("chain", 2, 4, seed=0)
    tree = TreeBatch(tree.tokens, tree.parents, tree.num_nodes, draft_probs=torch.full((2, 4, 8), 1 / 8))
    assert tree.with_num_nodes(torch.ones(2, dtype=torch.int64)).draft_probs is tree.draft_probs
    assert compact(tree, tree.valid).draft_probs is None  # a filtered tree falls back to the deterministic rule


# ------------------------------------------------------------------------------------- one-hot: exact
def one_hot_logits(pred: torch.Tensor, V: int) -> torch.Tensor:
    """[B, T] tokens -> [B, T, V] logits whose softmax is exactly one-hot in float32."""
    return torch.nn.functional.one_hot(pred, V).float() * 1e4


@pytest.mark.parametrize("kind", ["chain", "star", "random"])
@pytest.mark.parametrize("T", [1, 7, 33])
def test_one_hot_target_gives_the_greedy_result(kind, T):
    """A one-hot target leaves nothing to chance: both rules must return exactly greedy acceptance, and
    the recursive rule must do so whatever the draft distribution (one-hot on the proposed token, or not)."""
    B, V = 3, 40
    tree = make_tree(kind, B, T, seed=T)
    gen = torch.Generator().manual_seed(T)
    # targets that agree with some of the tree's tokens: half of the nodes predict a child's token
    pred = torch.randint(0, V, (B, T), generator=gen)
    child = torch.where(tree._parents >= 0, tree.tokens, -1)
    agree = torch.rand(B, T, generator=gen) < 0.5
    pred.scatter_(1, tree._parents.clamp(min=0), torch.where(agree & (child >= 0), child, pred.gather(1, tree._parents.clamp(min=0))))
    logits = one_hot_logits(pred, V)
    want = greedy_accept(tree, logits)
    s = Sampling(1.0)
    for q in (None, torch.nn.functional.one_hot(tree.tokens, V).float().roll(-1, 1),  # q one-hot on node i+1's token
              torch.softmax(torch.randn(B, T, V, generator=gen), -1)):
        t = TreeBatch(tree.tokens, tree.parents, tree.num_nodes, draft_probs=q)
        got = sample_accept(t, logits, s, gen)
        for a, b in zip(got, want):
            assert torch.equal(a, b), (kind, T, q is None)


# ---------------------------------------------------------------------------------- structural invariants
@pytest.mark.parametrize("kind", ["chain", "star", "random"])
@pytest.mark.parametrize("with_q", [False, True])
def test_structure_of_sampled_acceptance(kind, with_q):
    """Accepted nodes form a root path with consecutive depths, the tokens are theirs, the bonus follows
    the last one, has target probability > 0 and is none of its children's tokens (each was tried)."""
    B, T, V = 16, 9, 10  # tokens: ranks among siblings, < T <= V
    for seed in range(20):
        gen = torch.Generator().manual_seed(seed)
        tree = make_tree(kind, B, T, seed=seed)
        tree = TreeBatch(*_distinct_siblings(tree), draft_probs=torch.softmax(torch.randn(B, T, V, generator=gen), -1)
                         if with_q else None)
        logits = torch.randn(B, T, V, generator=gen) * 2
        s = Sampling(1.0, top_k=4)
        tokens, n, nodes = sample_accept(tree, logits, s, gen)
        p = s.probs(logits)
        for b in range(B):
            k = int(n[b])
            path = nodes[b, :k + 1].tolist()
            assert path[0] == 0 and (nodes[b, k + 1:] == -1).all() and (tokens[b, k + 1:] == -1).all()
            for j in range(1, k + 1):
                assert int(tree.parents[b, path[j]]) == path[j - 1] and path[j] < int(tree.num_nodes[b])
                assert int(tokens[b, j - 1]) == int(tree.tokens[b, path[j]])
            bonus, last = int(tokens[b, k]), path[k]
            assert p[b, last, bonus] > 0
            children = [int(tree.tokens[b, i]) for i in range(1, int(tree.num_nodes[b]))
                        if int(tree.parents[b, i]) == last]
            assert bonus not in children


def _distinct_siblings(tree: TreeBatch) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The tree with each node's token replaced by its rank among its siblings (distinct, < T)."""
    same = (tree.parents[:, :, None] == tree.parents[:, None, :])
    before = same & (torch.arange(tree.size)[None, None, :] < torch.arange(tree.size)[None, :, None])
    return before.sum(-1), tree.parents, tree.num_nodes


# ---------------------------------------------------------------------------------------- the models
@pytest.fixture(scope="module")
def pair():
    return tiny_pair()


# Trees of depth 2 are all the first two tokens can use. Every supplier kind and one filtered case in CI,
# each with one of the warps (so every warp runs too); the full grid (filters on every kind) is slow.
CI_CASES = [("ar", None, 0), ("chain", None, 1), ("tree", None, 0), ("tree", None, 2), ("smart", None, 3),
            ("prompt_lookup", None, 1), ("retrieval", None, 2), ("sampled_star", None, 3), ("chain", "valuspec", 2)]
KINDS = ["ar", "chain", "tree", "smart", "prompt_lookup", "retrieval", "sampled_star"]
SLOW_CASES = [(k, f, w) for k in KINDS for f in (None, "fixed", "valuspec") for w in range(len(WARPS))
              if (k, f, w) not in CI_CASES and (f is None or k not in ("ar", "sampled_star"))]


def _check_distribution(pair, kind, filt, warp, tmp_path):
    target, draft = pair
    s = WARPS[warp]
    draws, stats = draw_two_tokens(target, draft, kind, filt, s, SAMPLE_ROWS, tmp_path)
    assert_matches(draws, exact_two_tokens(target, s), f"{kind}/{filt}/{s}")
    if kind != "ar" and filt is None:
        assert stats.mean_accepted_length > 1.0  # candidates were accepted: the rules ran, not AR steps alone


@pytest.mark.parametrize("kind, filt, warp", CI_CASES)
def test_first_two_tokens_follow_the_target(pair, kind, filt, warp, tmp_path):
    _check_distribution(pair, kind, filt, warp, tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize("kind, filt, warp", SLOW_CASES)
def test_first_two_tokens_follow_the_target_grid(pair, kind, filt, warp, tmp_path):
    _check_distribution(pair, kind, filt, warp, tmp_path)


def test_a_biased_rule_is_caught(pair):
    """The distribution test has power: emitting the draft's own sampled chain (what accepting every
    candidate would do) is rejected at this sample size."""
    target, draft = pair
    s = WARPS[0]
    sup = specdec.DraftSupplier(draft, mode="chain", depth=2)
    sup.attach(target)
    ids = torch.tensor([TINY_PROMPT]).expand(SAMPLE_ROWS, -1).contiguous()
    state = DecodeState.begin(ids, torch.zeros(SAMPLE_ROWS, dtype=torch.int64), max_new_tokens=2, capacity=32,
                              eos_token_ids=[], pad_token_id=0, sampling=s, generator=torch.Generator().manual_seed(0))
    sup.start(state)
    with pytest.raises(AssertionError, match="chi-square"):
        assert_matches(sup.propose(state).tokens[:, 1:3], exact_two_tokens(target, s), "accept-all")


# --------------------------------------------------------------------------------------- determinism
@pytest.mark.parametrize("kind", ["chain", "tree", "sampled_star"])
def test_seeded_runs_repeat(pair, kind, tmp_path):
    target, draft = pair
    s = Sampling(1.0, top_p=0.9)
    a, _ = draw_two_tokens(target, draft, kind, None, s, 64, tmp_path, seed=1)
    b, _ = draw_two_tokens(target, draft, kind, None, s, 64, tmp_path, seed=1)
    c, _ = draw_two_tokens(target, draft, kind, None, s, 64, tmp_path, seed=2)
    assert torch.equal(a, b)
    assert not torch.equal(a, c)


def test_temperature_zero_is_greedy(pair):
    """temperature 0 ignores top_k/top_p and the generator: the greedy output, equal to generate()."""
    target, draft = pair
    ids = torch.tensor([TINY_PROMPT, [9, 4, 6]])
    ref = target.generate(ids, max_new_tokens=6, do_sample=False, eos_token_id=None, pad_token_id=0)
    gen = specdec.SpeculativeGenerator(target, specdec.DraftSupplier(draft, mode="chain", depth=3))
    out = gen.generate(ids, max_new_tokens=6, eos_token_id=[], pad_token_id=0, temperature=0.0, top_k=3,
                       top_p=0.5, generator=torch.Generator().manual_seed(0))
    assert torch.equal(out.sequences, ref)


def test_predicted_samples_follow_matching_nodes():
    """accept_predicted with a hand-made tree: root r -> {a -> c, b}; samples [a, c, z, w] accept r, a, c
    and the bonus w (the sampling module's worked example)."""
    tree = TreeBatch.from_parents([[0, 1, 2, 3]], [[-1, 0, 0, 1]])
    tokens, n, nodes = accept_predicted(tree, torch.tensor([[1, 3, 9, 8]]))
    assert tokens.tolist() == [[1, 3, 8]] and n.tolist() == [2] and nodes.tolist() == [[0, 1, 3]]
