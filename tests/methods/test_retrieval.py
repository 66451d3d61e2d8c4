"""Retrieval: the suffix-array datastore against brute force, the trie's counts and budget, file checks, and
output identity of the retrieval supplier (docs/retrieval.md)."""

from __future__ import annotations

import math
import sysconfig
from pathlib import Path

import numpy as np
import pytest
import torch
from numpy.lib.stride_tricks import sliding_window_view

import specdec
from specdec.cost import CostModel
from specdec.datastore import Datastore, Match
from specdec.demo_pair import pair_path
from specdec.app.models import load_tokenizer
from specdec.state import DecodeState
from specdec.planner import StepPlanner
from specdec.suppliers.trie import _leaves_before, plan_trie
from specdec.suppliers.trie import prefix_trie
from tests.helpers import VOCAB, eos_mid_batch_case, make_cost, ragged_prompts, reference, store_of_outputs


# ---------------------------------------------------------------------------------------------- brute force
def brute_longest(tokens: np.ndarray, context: list[int], max_suffix: int, min_suffix: int) -> tuple[int, list[int]]:
    """Longest suffix of `context` (max_suffix..min_suffix) occurring in `tokens`; its sorted positions."""
    for n in range(min(max_suffix, len(context)), min_suffix - 1, -1):
        if n > tokens.size:
            continue
        hits = np.flatnonzero((sliding_window_view(tokens, n) == np.asarray(context[-n:])).all(1))
        if hits.size:
            return n, hits.tolist()
    return 0, []


def brute_continuation(tokens: np.ndarray, pos: int, n: int, k: int) -> list[int]:
    out = []
    for t in tokens[pos + n: pos + n + k].tolist():
        if t < 0:
            break
        out.append(t)
    return out


def check_against_brute_force(store: Datastore, contexts: list[list[int]], max_suffix: int, min_suffix: int) -> int:
    """Every context's match and continuations equal brute force; returns how many contexts matched."""
    tokens = np.asarray(store.tokens)
    width = max(map(len, contexts))
    ctx = np.full((len(contexts), width), -1, dtype=np.int64)
    for b, c in enumerate(contexts):
        ctx[b, width - len(c):] = c
    match = store.longest_match(ctx, max_suffix=max_suffix, min_suffix=min_suffix)
    cont = store.continuations(match, max_matches=10**9, length=5)
    matched = 0
    for b, c in enumerate(contexts):
        n, hits = brute_longest(tokens, c, max_suffix, min_suffix)
        assert int(match.length[b]) == n, f"context {c}"
        assert sorted(np.asarray(store.suffix_array[match.lo[b]:match.hi[b]]).tolist()) == hits
        want = sorted(brute_continuation(tokens, p, n, 5) for p in hits)
        got = sorted([t for t in row if t >= 0] for row in cont[b, :len(hits)].tolist())
        assert got == want and bool((cont[b, len(hits):] == -1).all())
        matched += n > 0
    return matched


@pytest.mark.parametrize("seed, vocab", [(0, 3), (1, 5), (2, 40)])
def test_queries_equal_brute_force_on_random_tokens(tmp_path, seed, vocab):
    rng = np.random.default_rng(seed)
    docs = [rng.integers(0, vocab, int(rng.integers(1, 60))) for _ in range(40)]
    store = Datastore.build(None, docs, tmp_path, vocab_size=vocab, progress=False)
    contexts = [rng.integers(0, vocab, int(rng.integers(1, 20))).tolist() for _ in range(60)]
    # and contexts cut from the corpus itself, so long matches happen
    for d in docs[:20]:
        cut = int(rng.integers(1, d.size + 1))
        contexts.append(d[max(0, cut - 12):cut].tolist())
    assert check_against_brute_force(store, contexts, max_suffix=8, min_suffix=2) > 20


def test_queries_equal_brute_force_on_real_text(tmp_path):
    tok = load_tokenizer(str(pair_path("target")))
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    files = [stdlib / "textwrap.py", stdlib / "json" / "__init__.py", stdlib / "bisect.py"]
    store = Datastore.build(tok, files, tmp_path, progress=False)
    assert store.header["documents"] == 3 and store.num_tokens > 5000
    tokens = np.asarray(store.tokens)
    rng = np.random.default_rng(0)
    contexts = []
    for end in rng.integers(20, tokens.size, 40):
        window = tokens[end - 20:end]
        contexts.append(window[window >= 0].tolist() or [5])
    contexts += [tok("    def frobnicate(self, x):\n        return", add_special_tokens=False).input_ids]
    assert check_against_brute_force(store, contexts, max_suffix=16, min_suffix=2) >= 35


def test_documents_never_match_across_the_separator(tmp_path):
    store = Datastore.build(None, [np.array([1, 2, 3]), np.array([4, 5, 6, 7]), np.array([1, 2])], tmp_path,
                            vocab_size=10, progress=False)
    assert np.asarray(store.tokens).tolist() == [1, 2, 3, -1, 4, 5, 6, 7, -1, 1, 2, -1]
    ctx = np.array([[2, 3, 4], [9, 1, 2], [-1, 3, 4]])
    match = store.longest_match(ctx, max_suffix=3, min_suffix=2)
    # "3 4" spans two documents: only "... 4" alone would match and 1 token is below min_suffix
    assert match.length.tolist() == [0, 2, 0]
    cont = store.continuations(match, max_matches=10, length=4)
    # "1 2" ends document 2 and continues with "3" in document 0; it never continues into another document
    assert sorted(cont[1].tolist()) == [[-1, -1, -1, -1], [3, -1, -1, -1]]
    assert bool((cont[[0, 2]] == -1).all())


def test_more_matches_than_max_matches_are_sampled_evenly(tmp_path):
    docs = [np.array([1, 2, t]) for t in range(3, 23)]  # "1 2" occurs 20 times, followed by 3..22
    store = Datastore.build(None, docs, tmp_path, vocab_size=30, progress=False)
    match = store.longest_match(np.array([[1, 2]]), max_suffix=2, min_suffix=2)
    assert (match.hi - match.lo).tolist() == [20]
    cont = store.continuations(match, max_matches=5, length=1)
    assert cont[0, :, 0].tolist() == [3, 7, 11, 15, 19]  # suffix-array order: every 4th, not the first 5


# ---------------------------------------------------------------------------------------------- the trie
def test_trie_counts_and_top_budget_on_a_hand_worked_case():
    cont = np.array([[[5, 6, 7], [5, 6, 7], [5, 6, 8], [5, 9, -1], [4, 1, -1], [-1, -1, -1]]])
    # prefixes: [5] x4, [5 6] x3, [5 6 7] x2, [5 6 8] x1, [5 9] x1, [4] x1, [4 1] x1; 5 non-empty continuations
    full = prefix_trie(cont)
    assert full.num_nodes.tolist() == [8]
    assert full.tokens[0, 1:].tolist() == [5, 4, 6, 9, 1, 7, 8]  # by depth, then first occurrence
    assert full.parents[0].tolist() == [-1, 0, 0, 1, 1, 2, 3, 3]
    assert full.counts[0].tolist() == [5, 4, 1, 3, 1, 1, 2, 1]
    np.testing.assert_allclose(full.logp()[0], np.log([1, 4 / 5, 1 / 5, 3 / 5, 1 / 5, 1 / 5, 2 / 5, 1 / 5]), rtol=1e-6)
    # budget 4 (root included): the three most frequent prefixes [5], [5 6], [5 6 7]
    top = prefix_trie(cont, budget=4)
    assert top.num_nodes.tolist() == [4]
    assert top.tokens[0, 1:].tolist() == [5, 6, 7] and top.parents[0].tolist() == [-1, 0, 1, 2]
    # budget 5: four prefixes tie at count 1 for the last slot; the shallowest, first seen wins: [4]
    assert prefix_trie(cont, budget=5).tokens[0, 1:].tolist() == [5, 4, 6, 7]
    assert prefix_trie(cont, budget=1).num_nodes.tolist() == [1]


@pytest.mark.parametrize("budget", [2, 5, 12, 40])
def test_trie_budget_keeps_the_most_frequent_prefixes_prefix_closed(budget):
    rng = np.random.default_rng(budget)
    B, M, K = 3, 30, 5
    cont = rng.integers(0, 3, (B, M, K))
    cont = np.where(np.arange(K) < rng.integers(0, K + 1, (B, M, 1)), cont, -1)
    for sort_first in (False, True):
        c = np.array([sorted(row.tolist()) for row in cont]) if sort_first else cont
        trie = prefix_trie(c, budget=budget, presorted=sort_first)
        for b in range(B):
            counts: dict[tuple, int] = {}
            for row in c[b].tolist():
                for j in range(K):
                    if row[j] < 0:
                        break
                    counts[tuple(row[:j + 1])] = counts.get(tuple(row[:j + 1]), 0) + 1
            n = int(trie.num_nodes[b])
            assert n == min(budget, 1 + len(counts))
            paths = {0: ()}
            for i in range(1, n):
                parent = int(trie.parents[b, i])
                assert 0 <= parent < i and parent in paths  # topological and prefix-closed
                paths[i] = paths[parent] + (int(trie.tokens[b, i]),)
                assert counts[paths[i]] == int(trie.counts[b, i])
            assert len(set(paths.values())) == n
            kept = sorted((counts[p] for p in list(paths.values())[1:]), reverse=True)
            assert kept == sorted(counts.values(), reverse=True)[:n - 1]


# ---------------------------------------------------------------------------------------------- files
def word_tokenizer(vocab: int, prefix: str = "t"):
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.WordLevel({f"{prefix}{i}": i for i in range(vocab)}, unk_token=f"{prefix}0"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token=f"{prefix}0", name_or_path=f"words-{prefix}{vocab}")


@pytest.fixture(scope="module")
def qwen_sized():
    """A 151,936-token vocabulary (Qwen2's), as a word-level tokenizer built in memory."""
    return word_tokenizer(151_936)


def test_a_152k_vocabulary_round_trips(tmp_path, qwen_sized):
    rng = np.random.default_rng(0)
    words = rng.integers(0, 151_936, 3000)
    words[:4] = [151_935, 65_535, 65_536, 0]  # ids past u16, REST's limit
    text = " ".join(f"t{i}" for i in words)
    built = Datastore.build(qwen_sized, [], tmp_path / "ds", texts=[text, "t151935 t65536 t7"], progress=False)
    store = Datastore.open(tmp_path / "ds", tokenizer=qwen_sized)
    assert store.tokens.dtype == np.int32 and isinstance(store.tokens, np.memmap)
    assert store.vocab_size == 151_936 and store.num_tokens == 3000 + 1 + 3 + 1 == built.num_tokens
    assert int(np.asarray(store.tokens).max()) == 151_935
    match = store.longest_match(np.array([[151_935, 65_535], [7, 151_935]]), max_suffix=2, min_suffix=1)
    assert match.length.tolist() == [2, 1]
    cont = store.continuations(match, max_matches=10, length=2)
    assert cont[0, 0].tolist() == [65_536, 0]
    assert sorted(cont[1, :2].tolist()) == [[65_535, 65_536], [65_536, 7]]


def test_tokenizer_mismatch_raises(tmp_path, qwen_sized):
    Datastore.build(qwen_sized, [], tmp_path, texts=["t1 t2 t3"], progress=False)
    with pytest.raises(ValueError, match="tokenizer: 'words-u151936' .* does not match the datastore"):
        Datastore.open(tmp_path, tokenizer=word_tokenizer(151_936, prefix="u"))
    store = Datastore.open(tmp_path)
    with pytest.raises(ValueError, match="tokenizer: .* does not match"):
        store.extend(word_tokenizer(8), texts=["t1"])


def test_truncated_or_corrupt_files_raise(tmp_path):
    store = Datastore.build(None, [np.arange(50) % 7], tmp_path, vocab_size=7, progress=False)
    arrays = tmp_path / store.header["generation"]
    suffixes = (arrays / "suffix_array.npy").read_bytes()
    (arrays / "tokens.npy").write_bytes((arrays / "tokens.npy").read_bytes()[:-20])
    with pytest.raises(ValueError, match="tokens.npy: truncated, corrupt or missing"):
        Datastore.open(tmp_path)
    store = Datastore.build(None, [np.arange(60) % 7], tmp_path, vocab_size=7, progress=False)
    (tmp_path / store.header["generation"] / "suffix_array.npy").write_bytes(suffixes)  # another store's array
    with pytest.raises(ValueError, match=r"suffix_array.npy: int32\[51\] .* the header says int32\[61\]"):
        Datastore.open(tmp_path)
    (tmp_path / "datastore.json").write_text("{not json")
    with pytest.raises(ValueError, match="is not JSON"):
        Datastore.open(tmp_path)
    with pytest.raises(ValueError, match="holds no datastore"):
        Datastore.open(tmp_path / "nowhere")


def test_sources_files_folders_jsonl_and_extend(tmp_path):
    tok = load_tokenizer(str(pair_path("target")))
    src = tmp_path / "src"
    (src / "pkg").mkdir(parents=True)
    (src / "a.py").write_text("def f(x):\n    return x + 1\n")
    (src / "pkg" / "b.txt").write_text("hello world")
    (src / "pkg" / "skip.bin").write_bytes(b"\x00\x01")
    (src / "answers.jsonl").write_text('{"text": "x = 1"}\n{"text": "y = 2"}\n')
    np.save(src / "ids.npy", np.array([7, 8, 9]))
    store = Datastore.build(tok, [src], tmp_path / "ds", progress=False)
    assert store.header["documents"] == 5  # a.py, two JSONL lines, ids.npy, b.txt; not skip.bin
    before = store.num_tokens
    store.extend(tok, texts=["def f(x):\n    return x + 2\n"])
    assert store.header["documents"] == 6 and store.num_tokens > before
    assert Datastore.open(tmp_path / "ds", tokenizer=tok).num_tokens == store.num_tokens
    one, two = (tok(f"def f(x):\n    return x + {i}\n", add_special_tokens=False).input_ids for i in (1, 2))
    common = next(i for i, (a, b) in enumerate(zip(one, two)) if a != b)
    assert common >= 6
    match = store.longest_match(np.array([one[:common]]), max_suffix=8, min_suffix=2)
    assert match.length.tolist() == [min(8, common)] and (match.hi - match.lo).tolist() == [2]  # a.py, the answer
    with pytest.raises(ValueError, match="sources: no such file or folder"):
        Datastore.build(tok, [tmp_path / "missing"], tmp_path / "x", progress=False)
    (src / "bad.jsonl").write_text('{"body": "x"}\n')
    with pytest.raises(ValueError, match="line 1 has no string field 'text'"):
        Datastore.build(tok, [src / "bad.jsonl"], tmp_path / "x", progress=False)
    with pytest.raises(ValueError, match=r"token ids outside the vocabulary \[0, 5\)"):
        Datastore.build(None, [np.array([1, 5])], tmp_path / "x", vocab_size=5, progress=False)


# ---------------------------------------------------------------------------------------------- the supplier
def test_supplier_tree_from_a_hand_worked_store(tmp_path):
    store = Datastore.build(None, [np.array([1, 2, 3, 4]), np.array([1, 2, 3, 5]), np.array([7, 2, 3, 4])],
                            tmp_path, vocab_size=10, progress=False)
    ids = torch.tensor([[0, 9, 2, 3], [6, 6, 6, 6]])
    mask = torch.tensor([[0, 1, 1, 1], [1, 1, 1, 1]])
    state = DecodeState.begin(ids, (mask == 0).sum(1), max_new_tokens=4, capacity=32, eos_token_ids=[], pad_token_id=0)
    tree = specdec.RetrievalSupplier(store, max_suffix=3, min_suffix=2, continuation=3).propose(state)
    # row 0: "9 2 3" is absent, "2 3" occurs 3 times followed by 4, 5, 4; row 1: no match, the root alone
    assert tree.num_nodes.tolist() == [3, 1]
    assert tree.tokens[0].tolist() == [3, 4, 5] and tree.parents[0].tolist() == [-1, 0, 0]
    assert tree.tokens[1, 0].item() == 6
    torch.testing.assert_close(tree.logp[0], torch.tensor([0.0, np.log(2 / 3), np.log(1 / 3)], dtype=torch.float32))
    tree.validate(vocab_size=10)


@pytest.mark.parametrize("kwargs, match", [
    (dict(max_suffix=0), "max_suffix: expected an int >= 1"),
    (dict(min_suffix=5, max_suffix=3), "min_suffix: 5 exceeds max_suffix 3"),
    (dict(budget=0), "budget: expected an int >= 1"),
    (dict(continuation=True), "continuation: expected an int >= 1"),
    (dict(alpha=0), "alpha: expected a number > 0"),
    (dict(benefit="gain"), "benefit: 'gain' is not one of"),
    (dict(cost_model="fast"), "cost_model: expected a CostModel, a Profile or None, got str"),
])
def test_supplier_arguments(tmp_path, kwargs, match):
    store = Datastore.build(None, [np.array([1, 2])], tmp_path, vocab_size=5, progress=False)
    with pytest.raises(ValueError, match=match):
        specdec.RetrievalSupplier(store, **kwargs)
    with pytest.raises(ValueError, match="datastore: expected a specdec Datastore"):
        specdec.RetrievalSupplier(str(tmp_path))


def test_supplier_refuses_a_store_with_a_larger_vocabulary(tmp_path, models):
    _, target, _ = models
    store = Datastore.build(None, [np.array([1, 2])], tmp_path, vocab_size=VOCAB + 1, progress=False)
    with pytest.raises(ValueError, match=f"datastore: built over {VOCAB + 1} token ids"):
        specdec.SpeculativeGenerator(target, specdec.RetrievalSupplier(store))


@pytest.mark.hf
@pytest.mark.parametrize("lengths", [[7], [5, 11, 8]], ids=["batch1", "ragged3"])
def test_identity(tmp_path, models, lengths):
    arch, target, _ = models
    ids, mask = ragged_prompts(lengths)
    ref = reference(target, ids, mask, 24, eos=None)
    store = store_of_outputs(tmp_path, ids, mask, ref[:, ids.shape[1]:ids.shape[1] + 16])  # the first 16 only
    gen = specdec.SpeculativeGenerator(target, specdec.RetrievalSupplier(store, continuation=6, budget=12))
    out = gen.generate(ids, attention_mask=mask, max_new_tokens=24, pad_token_id=0, eos_token_id=[])
    assert torch.equal(out.sequences, ref), arch
    accepted = out.stats.accepted_lengths
    assert max(accepted) > 2 and out.stats.mean_accepted_length > 1.5, accepted  # retrieval did the work
    assert min(accepted) == 1  # and past the stored 16 tokens, steps fell back to one token


@pytest.mark.hf
def test_identity_eos_mid_batch(tmp_path, models):
    arch, target, _ = models
    ids, mask, eos, ref, store = eos_mid_batch_case(tmp_path, target)
    gen = specdec.SpeculativeGenerator(target, specdec.RetrievalSupplier(store, continuation=5, budget=16))
    out = gen.generate(ids, attention_mask=mask, max_new_tokens=20, eos_token_id=eos, pad_token_id=0)
    assert torch.equal(out.sequences, ref), arch
    assert out.stats.mean_accepted_length > 1.5
    row0 = out.sequences[0, ids.shape[1]:].tolist()
    assert eos in row0 and all(t == 0 for t in row0[row0.index(eos) + 1:])


def test_match_type_is_exported():
    assert Match.__module__ == "specdec.datastore" and specdec.Datastore is Datastore


# ---------------------------------------------------------------------------------------------- SMART's rule
def exp_cost(delta: float) -> CostModel:
    """Verification V(n) = exp(delta n), no loop or draft cost: SMART's test on a trie, alpha * gain * V(n) >
    L * (V(n + 1) - V(n)), reads alpha * gain > L * (exp(delta) - 1)."""
    return make_cost(1.0, 1.0, delta, 1.0)


def trie_planner(cost: CostModel) -> StepPlanner:
    """A retrieval planner on `cost` whose calibration is the identity (a node's probability is its share)."""
    planner = StepPlanner(3, choices=(0, 3), host=True)
    planner.start(cost)
    planner.calibration = lambda p: p
    return planner


def keep_of(trie, planner, alpha: float, benefit: str) -> np.ndarray:
    return plan_trie(trie.parents, trie.counts, trie.num_nodes, planner, alpha, benefit)[0]


def test_smart_rule_on_a_hand_worked_trie():
    # 10 continuations; prefixes by frequency: [1] .8, [1 2] .5, [1 3] .3, [4] .1 ... (counts 8, 5, 3, 1, ...)
    cont = np.array([[[1, 2, 5]] * 5 + [[1, 3, -1]] * 3 + [[4, -1, -1]] + [[6, 7, -1]]])
    trie = prefix_trie(cont)
    planner = trie_planner(exp_cost(math.log1p(0.1)))  # each node's verification costs 10% more than the last
    # frequency order [1] .8, [1 2] .5, [1 2 5] .5, [1 3] .3, [4] .1, [6] .1, [6 7] .1; paths before each:
    order = np.array([[1, 4, 7, 5, 2, 3, 6]])  # those prefixes' node indices in the breadth-first trie
    assert [trie.tokens[0, i] for i in order[0]] == [1, 2, 5, 3, 4, 6, 7]
    assert _leaves_before(trie.parents, order, np.ones_like(order, dtype=bool)).tolist() == [[1, 1, 1, 1, 2, 3, 4]]
    # "expected", alpha 1 (test 10 p > L_j): .8 > .1, .5 > .18, .5 > .23, .3 > .28, then .1 > .31 fails
    sub = trie.select(keep_of(trie, planner, 1.0, "expected"))
    paths = {tuple(p) for p in tree_paths(sub)}
    assert sub.num_nodes.tolist() == [5] and paths == {(1, 2, 5), (1, 3)}
    # "paper", alpha .7 (test 7 p / leaves > L_j): 5.6 > 1, 3.5 > 1.8, 3.5 > 2.3, then 2.1 > 2.8 fails
    assert trie.select(keep_of(trie, planner, 0.7, "paper")).num_nodes.tolist() == [4]
    # alpha 3.15: [4] passes "expected" (3.15 > L 3.1, then [6] fails: 3.15 < 3.2) but not "paper" (3.15 / 2 leaves)
    assert trie.select(keep_of(trie, planner, 3.15, "expected")).num_nodes.tolist() == [6]
    assert trie.select(keep_of(trie, planner, 3.15, "paper")).num_nodes.tolist() == [5]


def tree_paths(trie) -> list[list[int]]:
    leaves = set(range(1, int(trie.num_nodes[0]))) - set(trie.parents[0, 1:int(trie.num_nodes[0])].tolist())
    out = []
    for leaf in leaves:
        path, i = [], leaf
        while i > 0:
            path.append(int(trie.tokens[0, i]))
            i = int(trie.parents[0, i])
        out.append(path[::-1])
    return out


def test_smart_rule_sizes_trees_between_root_and_budget(tmp_path):
    docs = [np.array([1, 2] + [3 + (i * 7 + j) % 20 for j in range(8)]) for i in range(30)]
    store = Datastore.build(None, docs, tmp_path, vocab_size=VOCAB, progress=False)
    ids = torch.tensor([[5, 1, 2]])
    state = DecodeState.begin(ids, torch.zeros(1, dtype=torch.int64), max_new_tokens=4, capacity=80, eos_token_ids=[],
                              pad_token_id=0)
    sizes = {}
    for name, delta in (("flat", 1e-6), ("steep", 3.0)):
        sup = specdec.RetrievalSupplier(store, budget=24, cost_model=exp_cost(delta))
        sup.start(state)
        tree = sup.propose(state)
        tree.validate(vocab_size=VOCAB)
        sizes[name] = int(tree.num_nodes[0])
    plain = int(specdec.RetrievalSupplier(store, budget=24).propose(state).num_nodes[0])
    assert sizes["flat"] == plain == 24  # cost nearly flat: the budget binds
    assert sizes["steep"] == 1  # each node costs e^3 times the last: a plain step, the root alone


@pytest.mark.hf
def test_identity_with_smart_rule(tmp_path, models):
    arch, target, _ = models
    ids, mask = ragged_prompts([5, 11, 8])
    ref = reference(target, ids, mask, 24, eos=None)
    store = store_of_outputs(tmp_path, ids, mask, ref[:, ids.shape[1]:ids.shape[1] + 16])
    sup = specdec.RetrievalSupplier(store, continuation=6, budget=16, cost_model=exp_cost(0.05))
    out = specdec.SpeculativeGenerator(target, sup).generate(ids, attention_mask=mask, max_new_tokens=24,
                                                             pad_token_id=0, eos_token_id=[])
    assert torch.equal(out.sequences, ref), arch
    assert out.stats.mean_accepted_length > 1.5
