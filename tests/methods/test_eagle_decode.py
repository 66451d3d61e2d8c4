"""Decoding with EAGLE heads: output identity with generate(do_sample=False) (both layouts, three
architectures, batch 1, ragged, EOS mid-batch, ValuSpec on top), the backlog of steps that do not draft,
lossless sampling (chi-square), and training: a few dozen steps lower the loss and raise the accepted
length on held-out prompts."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest
import torch

import specdec
from specdec.sampling import Sampling
from specdec.state import DecodeState
from specdec.suppliers.base import root_only
from specdec.suppliers.eagle import EagleRunner
from specdec.training import TrainSettings, greedy_sequences, target_batch, train_eagle, ttt_logits, ttt_losses
from specdec.verify import PromptBlock
from tests.eagle_helpers import eagle_target, head_tensors, write_head
from tests.helpers import WARPS, assert_matches, calibration, make_model, ragged_prompts

TRAIN = TrainSettings(steps=40, batch_size=8, seq_len=40, prompt_len=8, num_sequences=48, lr=3e-3, warmup=5,
                      checkpoint_every=1000, generate_batch=48)


def train_tiny(target, out, kind="eagle3", stop_at=None, **overrides):
    stream = torch.randint(3, 96, (4000,), generator=torch.Generator().manual_seed(11))
    return train_eagle(target, stream, out, settings=TRAIN, progress=False, kind=kind, stop_at=stop_at,
                       draft_vocab=80 if kind == "eagle3" else None, **overrides)  # under the suite's no_grad


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A llama target and heads trained briefly for it in both layouts, saved and loaded back."""
    target = eagle_target("llama")
    heads = {}
    for kind in ("eagle3", "eagle1"):
        out = tmp_path_factory.mktemp(kind)
        result = train_tiny(target, out, kind)
        heads[kind] = (specdec.EagleHead.from_pretrained(out, target), result)
    return target, heads


def reference(target, ids, mask, n, eos=None):
    return target.generate(ids, attention_mask=mask, max_new_tokens=n, do_sample=False, eos_token_id=eos,
                           pad_token_id=0)


def run(target, supplier, ids, mask, n, filt=None, eos=None):
    gen = specdec.SpeculativeGenerator(target, supplier, filt)
    return gen.generate(ids, attention_mask=mask, max_new_tokens=n, pad_token_id=0,
                        eos_token_id=[] if eos is None else eos)


@pytest.mark.hf
@pytest.mark.parametrize("arch", ["llama", "qwen2", "qwen3"])
@pytest.mark.parametrize("kind", ["eagle3", "eagle1"])
@pytest.mark.parametrize("lengths", [[7], [5, 11, 8]], ids=["batch1", "ragged3"])
def test_identity_random_heads(tmp_path, arch, kind, lengths):
    """Random heads written in the published layouts decode exactly what generate() does (tree and chain)."""
    target = eagle_target(arch)
    head = specdec.EagleHead.from_pretrained(write_head(tmp_path / kind, *head_tensors(target, kind)), target)
    ids, mask = ragged_prompts(lengths)
    ref = reference(target, ids, mask, 20)
    for supplier in (specdec.EagleSupplier(head, depth=4, topk=3, total_tokens=10),
                     specdec.EagleSupplier(head, mode="chain", depth=3)):
        out = run(target, supplier, ids, mask, 20)
        assert torch.equal(out.sequences, ref), f"{arch}/{kind}/{supplier.mode}"
        assert out.stats.accepted_lengths[:len(lengths)] == [1] * len(lengths)  # the first step: no features yet


@pytest.mark.hf
@pytest.mark.parametrize("kind", ["eagle3", "eagle1"])
@pytest.mark.parametrize("lengths", [[7], [5, 11, 8]], ids=["batch1", "ragged3"])
def test_identity_trained_heads(trained, kind, lengths):
    """Heads that get candidates accepted (and rejected): identity, tree and chain."""
    target, heads = trained
    head = heads[kind][0]
    ids, mask = ragged_prompts(lengths, seed=5)
    ref = reference(target, ids, mask, 24)
    for supplier in (specdec.EagleSupplier(head, depth=4, topk=3, total_tokens=10),
                     specdec.EagleSupplier(head, mode="chain", depth=4)):
        out = run(target, supplier, ids, mask, 24)
        assert torch.equal(out.sequences, ref), f"{kind}/{supplier.mode}"
        lengths = out.stats.accepted_lengths  # candidates accepted and rejected: both paths ran
        assert min(lengths) == 1 and (max(lengths) > 1 or supplier.mode == "chain"), f"{kind}/{supplier.mode}"


@pytest.mark.hf
@pytest.mark.parametrize("arch", ["qwen2", "qwen3"])
def test_identity_eos_mid_batch_random_heads(tmp_path, arch):
    target = eagle_target(arch)
    head = specdec.EagleHead.from_pretrained(write_head(tmp_path / "h", *head_tensors(target, "eagle3")), target)
    ids, mask = ragged_prompts([6, 10, 9], seed=3)
    eos = int(reference(target, ids, mask, 20)[0, ids.shape[1] + 4])
    ref = reference(target, ids, mask, 20, eos=eos)
    out = run(target, specdec.EagleSupplier(head, depth=3, topk=2, total_tokens=6), ids, mask, 20, eos=eos)
    assert torch.equal(out.sequences, ref)


@pytest.mark.hf
@pytest.mark.parametrize("kind", ["eagle3", "eagle1"])
def test_identity_eos_mid_batch(trained, kind):
    target, heads = trained
    ids, mask = ragged_prompts([6, 10, 9], seed=3)
    free = reference(target, ids, mask, 20)[:, ids.shape[1]:]
    eos = int(free[0, 4])
    ref = reference(target, ids, mask, 20, eos=eos)
    out = run(target, specdec.EagleSupplier(heads[kind][0], depth=4, topk=3, total_tokens=10), ids, mask, 20, eos=eos)
    assert torch.equal(out.sequences, ref)
    row0 = out.sequences[0, ids.shape[1]:].tolist()
    assert eos in row0 and all(t == 0 for t in row0[row0.index(eos) + 1:])


@pytest.mark.hf
@pytest.mark.parametrize("lengths", [[7], [5, 11, 8]], ids=["batch1", "ragged3"])
def test_identity_with_valuspec(trained, lengths):
    """ValuSpec prunes EAGLE trees with a separate scorer model sharing the target's tokenizer."""
    target, heads = trained
    scorer = make_model("llama", seed=4)
    ids, mask = ragged_prompts(lengths, seed=5)
    ref = reference(target, ids, mask, 24)
    filt = specdec.ValuSpecFilter(scorer, calibration(math.log(0.02)))
    out = run(target, specdec.EagleSupplier(heads["eagle3"][0], depth=4, topk=3, total_tokens=10), ids, mask, 24, filt)
    assert torch.equal(out.sequences, ref)
    f = out.stats.filter
    assert 0 < f.branches_kept < f.branches  # the scorer kept some branches and cut others


@pytest.mark.hf
def test_backlog_of_steps_that_do_not_draft(trained):
    """Two acceptances committed before one catch-up (a step that did not draft) give the head the same
    root logits as catching up after each: the backlog keeps every pair and its feature."""
    target, heads = trained
    head = heads["eagle3"][0]
    ids, mask = ragged_prompts([6, 9], seed=2)
    start = (mask == 0).sum(1)
    state = DecodeState.begin(ids, start, max_new_tokens=16, capacity=ids.shape[1] + 60, eos_token_ids=[],
                              pad_token_id=0)
    verifier = specdec.TreeVerifier(target)
    verifier.request_features(head.feature_layers)
    cache = verifier.new_cache(2, state.capacity)
    accs = [verifier.verify(root_only(state.root), cache, prompt=PromptBlock(ids[:, :-1], start))]
    bonus = accs[0].tokens[:, 0]
    greedy = reference(target, ids, mask, 4)[:, ids.shape[1]:]
    chain = torch.stack([bonus, greedy[:, 1], greedy[:, 2], torch.tensor([7, 7])], 1)  # two right, then a guess
    accs.append(verifier.verify(specdec.TreeBatch.chain(chain, torch.full((2,), 4)), cache))
    assert accs[1].host_num_accepted.tolist() == [2, 2] or accs[1].host_num_accepted.min() >= 2
    eager, lazy = EagleRunner(head), EagleRunner(head)
    for r in (eager, lazy):
        r.attach(target)
        r.start(state, region=16)
    eager.commit(accs[0])
    eager.catch_up()
    eager.commit(accs[1])
    lazy.commit(accs[0])
    lazy.commit(accs[1])
    assert lazy.backlog.tolist() == (ids.shape[1] - 1 - start.numpy() + 1 + accs[1].host_num_accepted + 1).tolist()
    torch.testing.assert_close(lazy.catch_up(), eager.catch_up(), rtol=1e-5, atol=1e-5)
    assert lazy.backlog.tolist() == [0, 0]
    with pytest.raises(RuntimeError, match="catch_up: a row has no pending pair"):
        lazy.catch_up()


class SkipEveryOther(specdec.EagleSupplier):
    """Drafts every other step only (as a planner's plain steps would): identity must hold."""

    def propose(self, state):
        self._n = getattr(self, "_n", 0) + 1
        return root_only(state.root) if self._n % 2 else super().propose(state)

    def start(self, state):
        self._n = 0
        super().start(state)


@pytest.mark.hf
def test_identity_when_some_steps_do_not_draft(trained):
    target, heads = trained
    ids, mask = ragged_prompts([5, 11, 8], seed=5)
    out = run(target, SkipEveryOther(heads["eagle3"][0], depth=4, topk=3, total_tokens=10), ids, mask, 24)
    assert torch.equal(out.sequences, reference(target, ids, mask, 24))
    assert out.stats.mean_accepted_length > 1.1


# -------------------------------------------------------------------------------------------- sampling
V = 12
TINY = dict(vocab_size=V, hidden_size=32, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
            num_key_value_heads=1)
PROMPT = [5, 7, 5]
ROWS = 100_000


def exact_three_tokens(target, s: Sampling) -> np.ndarray:
    """[V, V, V]: the target's probability of the first three tokens after PROMPT under `s`."""
    ids = torch.tensor([PROMPT + [a, b] for a in range(V) for b in range(V)])  # [V*V, 5]
    logits = target(ids).logits.float()
    p1 = s.probs(logits[0, 2]).double()  # [V]
    p2 = s.probs(logits[::V, 3]).double()  # [V, V]: row a
    p3 = s.probs(logits[:, 4]).double().view(V, V, V)
    return (p1[:, None, None] * p2[:, :, None] * p3).numpy()


@pytest.mark.parametrize("mode, warp", [("tree", 0), ("chain", 2),
                                       pytest.param("tree", 3, marks=pytest.mark.slow)])
def test_sampled_tokens_follow_the_target(mode, warp):
    """The second and third tokens come from one drafting step (the first step has no features):
    their joint law, with the first token's, is the target's (chi-square over 100k rows)."""
    target = make_model("llama", seed=3, **TINY)
    with torch.no_grad():
        target.lm_head.weight.mul_(0.4)
    head = specdec.EagleHead.initialize(target, aux_layers=(0, 0, 0), seed=2)
    with torch.no_grad():
        head.lm_head.weight.mul_(30)  # a spread, not uniform, q
    s = WARPS[warp]
    sup = specdec.EagleSupplier(head, mode=mode, depth=2, topk=2, total_tokens=7)
    ids = torch.tensor([PROMPT]).expand(ROWS, -1).contiguous()
    out = specdec.SpeculativeGenerator(target, sup).generate(
        ids, max_new_tokens=3, eos_token_id=[], pad_token_id=0, temperature=s.temperature, top_k=s.top_k,
        top_p=s.top_p, generator=torch.Generator().manual_seed(0))
    draws = out.sequences[:, len(PROMPT):]
    exact = exact_three_tokens(target, s)
    pairs = (draws[:, 1] * V + draws[:, 2]).numpy()
    first = draws[:, 0].numpy()
    assert_matches(torch.from_numpy(np.stack([first, pairs // V], 1)), exact.sum(2), f"eagle {mode} (1, 2)")
    assert_matches(draws[:, 1:], exact.sum(0), f"eagle {mode} (2, 3)")
    drafted = np.array(out.stats.accepted_lengths[ROWS:2 * ROWS])  # the second step's, per row
    assert (drafted > 1).mean() > 0.1  # drafted candidates were accepted: the recursive rule ran


# -------------------------------------------------------------------------------------------- training
@pytest.mark.hf
def test_training_lowers_loss_and_raises_accepted_length(trained, tmp_path):
    """Over the untrained head of the same seed: lower held-out test-time loss, longer accepted runs on
    held-out prompts (a direction with a margin; nothing timed)."""
    target, heads = trained
    head, result = heads["eagle3"]
    assert np.mean(result.losses[-5:]) < 0.8 * np.mean(result.losses[:5])
    fresh = specdec.EagleHead.initialize(target, draft_vocab=torch.arange(96)[head.t2d.cpu()], seed=TRAIN.seed)
    held = greedy_sequences(target, torch.randint(3, 96, (2000,), generator=torch.Generator().manual_seed(99)),
                            TrainSettings(**{**TRAIN.__dict__, "num_sequences": 8, "seed": 7}), progress=False)
    vocab = torch.arange(96)[head.t2d.cpu()]
    features, probs = target_batch(target, held, head.feature_layers, vocab)
    loss = lambda h: float(sum(0.8 ** j * l for j, l in enumerate(ttt_losses(h, held, features, probs, 7))))  # noqa: E731
    assert loss(head) < 0.8 * loss(fresh)
    ids, mask = ragged_prompts([6, 9, 7, 8], seed=21)
    accepted = [run(target, specdec.EagleSupplier(h, depth=4, topk=3, total_tokens=10), ids, mask, 24)
                .stats.mean_accepted_length for h in (fresh, head)]
    assert accepted[1] > accepted[0] + 0.3, accepted


@pytest.mark.hf
def test_training_time_test_is_what_decoding_computes(trained):
    """Step 0 of the training-time test at pair t is the head's catch-up output after the same prefix,
    and step j is the depth-j node of a chain that follows the sequence's own tokens: training and
    decoding compute the same function (positions, masks, fed-back outputs)."""
    target, heads = trained
    head = heads["eagle3"][0]
    seq = torch.tensor([[5, 17, 33, 8, 41, 9, 9, 60, 12, 7]])
    vocab = torch.arange(96)[head.t2d.cpu()]
    features, _ = target_batch(target, seq, head.feature_layers, vocab)
    logits = ttt_logits(head, seq, features, steps=3)  # [1, 9 - j, Vd] per step j
    P = 6  # decode from the prompt seq[:, :P]: the first step's bonus is seq[P] when the target agrees
    ids = seq[:, :P]
    state = DecodeState.begin(ids, torch.zeros(1, dtype=torch.int64), max_new_tokens=8, capacity=40, eos_token_ids=[],
                              pad_token_id=0)
    verifier = specdec.TreeVerifier(target)
    verifier.request_features(head.feature_layers)
    cache = verifier.new_cache(1, 40)
    acc = verifier.verify(root_only(state.root), cache, prompt=PromptBlock(ids[:, :-1], torch.zeros(1, dtype=torch.int64)))
    runner = EagleRunner(head)
    runner.attach(target)
    runner.start(state, region=8)
    acc = replace(acc, tokens=seq[:, P:P + 1])  # read the sequence's own next token (the feature is the same)
    runner.commit(acc)
    got = [runner.catch_up()[:, vocab]]
    runner.begin_tree(1, 2)
    parent = None
    for j in (1, 2):
        got.append(runner.forward_layer(seq[:, P + j:P + j + 1], parent)[:, 0][:, vocab])
        parent = torch.tensor([[j - 1]])
    tau = head.config.greedy_temperature  # greedy decoding ranks by the calibrated logits
    for j in range(3):  # the root pair (seq[P], f[P - 1]) is pair t = P - 1
        torch.testing.assert_close(got[j][0], logits[j][0, P - 1] / tau, rtol=1e-4, atol=1e-4)


def test_training_resumes_and_refuses_other_settings(tmp_path):
    """A run stopped at step 20 and resumed ends exactly as an uninterrupted one (same batches, optimizer
    moments and schedule); a checkpoint of other settings is refused."""
    target = eagle_target("llama")
    whole = train_tiny(target, tmp_path / "whole", steps=30, checkpoint_every=15)
    cut = train_tiny(target, tmp_path / "cut", steps=30, checkpoint_every=15, stop_at=15)
    assert len(cut.losses) == 15
    resumed = train_tiny(target, tmp_path / "cut", steps=30, checkpoint_every=15)
    assert resumed.losses == pytest.approx(whole.losses, rel=1e-4)
    with pytest.raises(ValueError, match="holds a checkpoint of other settings"):
        train_tiny(target, tmp_path / "cut", steps=30, checkpoint_every=15, lr=1e-3)


@pytest.mark.hf
def test_bounds_and_memory_estimate(trained):
    """EAGLE trees obey the positions bound the draft suppliers obey, and report the memory they take."""
    target, heads = trained
    head = heads["eagle3"][0]
    limit = target.config.max_position_embeddings
    with pytest.raises(ValueError, match="depth"):
        specdec.SpeculativeGenerator(target, specdec.EagleSupplier(head, depth=limit, topk=2, total_tokens=8))
    small, large = (specdec.EagleSupplier(head, depth=3, topk=2, total_tokens=n) for n in (4, 8))
    for s in (small, large):
        s.attach(target)
    one, two = small.memory_bytes(1, 64), small.memory_bytes(2, 64)
    assert set(one) == {"depth", "topk", "total_tokens"} and all(v > 0 for v in one.values())
    assert all(two[k] == 2 * one[k] for k in one)  # every buffer is per row
    assert large.memory_bytes(1, 64)["total_tokens"] > one["total_tokens"]
