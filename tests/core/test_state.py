"""The decoding state (`DecodeState`): the prompt it starts from, the acceptances it records (EOS, the output
budget), and the `generate` layout it returns. Hand-built acceptances drive it without a model; its EOS
handling is also checked end to end by tests/core/test_generate.py's identity tests."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import specdec
from specdec.sampling import GREEDY, Sampling
from specdec.state import DecodeState
from specdec.verify import Acceptance
from tests.helpers import make_model, ragged_prompts, reference

PAD, EOS = 95, 2
IDS = torch.tensor([[PAD, PAD, 5, 6, 7],
                    [8, 9, 10, 11, 12]])  # [B, P]: row 0 has 2 pad columns
START = torch.tensor([2, 0])


def begin(max_new_tokens: int = 6, eos: list[int] | None = None, ids: torch.Tensor = IDS,
          start: torch.Tensor = START, **kw) -> DecodeState:
    return DecodeState.begin(ids, start, max_new_tokens=max_new_tokens, capacity=16,
                             eos_token_ids=[EOS] if eos is None else eos, pad_token_id=PAD, **kw)


def acceptance(rows: list[list[int]]) -> Acceptance:
    """Each row's emitted tokens (accepted candidates, then the bonus) as the verifier returns them: -1 padding,
    a chain's node indices, and the host copies."""
    A = max(len(r) for r in rows)
    tokens = torch.tensor([r + [-1] * (A - len(r)) for r in rows])
    node_index = torch.tensor([list(range(len(r))) + [-1] * (A - len(r)) for r in rows])
    num_accepted = torch.tensor([len(r) - 1 for r in rows])
    return Acceptance(tokens, num_accepted, node_index, tokens.numpy().copy(), num_accepted.numpy().copy(),
                      node_index.numpy().copy())


def output(state: DecodeState) -> list[list[int]]:
    """Each row's emitted tokens (new_tokens up to num_new)."""
    return [state.new_tokens[b, :n].tolist() for b, n in enumerate(state.num_new)]


def test_begin_holds_the_prompts_and_nothing_emitted():
    generator = torch.Generator().manual_seed(0)
    state = begin(eos=[EOS, 7], sampling=Sampling(0.7, top_k=5), generator=generator)
    assert state.batch_size == 2 and state.max_new_tokens == 6 and state.capacity == 16
    assert state.history.shape == (2, 5 + 16) and state.history.dtype == np.int64
    assert (state.history[:, :5] == IDS.numpy()).all() and (state.history[:, 5:] == PAD).all()
    assert state.history_len.tolist() == [5, 5] and state.host_start.tolist() == [2, 0]
    rows = [state.history[b, state.host_start[b]:state.history_len[b]].tolist() for b in range(2)]
    assert rows == [[5, 6, 7], [8, 9, 10, 11, 12]]  # the root is the last of each row's tokens
    assert state.root.tolist() == [7, 12]
    assert state.new_tokens.shape == (2, 6) and (state.new_tokens == PAD).all()
    assert state.num_new.tolist() == [0, 0] and state.finished.tolist() == [False, False]
    assert state.eos_token_ids.tolist() == [EOS, 7]
    assert not state.done and state.active().tolist() == [True, True] and state.active().dtype == torch.bool
    assert torch.equal(state.sequences(), IDS)
    assert state.sampling == Sampling(0.7, top_k=5) and state.generator is generator
    assert begin().sampling == GREEDY and begin().generator is None


def test_begin_keeps_its_own_root():
    ids = IDS.clone()
    state = begin(ids=ids)
    ids[:, -1] = 0
    assert state.root.tolist() == [7, 12]


def test_append_records_each_rows_tokens_and_the_next_root():
    state = begin()
    assert state.append(acceptance([[20, 21, 22], [30]])).tolist() == [3, 1]
    assert state.history_len.tolist() == [8, 6]
    assert state.history[0, 5:8].tolist() == [20, 21, 22] and state.history[1, 5:6].tolist() == [30]
    assert state.root.tolist() == [22, 30]  # the bonus token: node 0 of the next tree
    assert state.append(acceptance([[23], [31, 32]])).tolist() == [1, 2]
    assert output(state) == [[20, 21, 22, 23], [30, 31, 32]] and state.num_new.tolist() == [4, 3]
    assert state.history[1, 5:8].tolist() == [30, 31, 32] and state.root.tolist() == [23, 32]
    assert not state.finished.any() and not state.done
    assert state.sequences().tolist() == [[PAD, PAD, 5, 6, 7, 20, 21, 22, 23],
                                          [8, 9, 10, 11, 12, 30, 31, 32, PAD]]


@pytest.mark.parametrize("eos", [[EOS], [4, EOS]])
def test_eos_finishes_a_row_and_nothing_after_it_is_output(eos):
    """Row 0 meets EOS mid-step: the EOS is its last output token, the token after it is committed (history
    mirrors the cache) but not output, and its later root-only steps output nothing. Row 1 goes on."""
    state = begin(eos=eos)
    assert state.append(acceptance([[20, EOS, 21], [30, 31]])).tolist() == [2, 2]
    assert state.finished.tolist() == [True, False] and state.active().tolist() == [False, True]
    assert output(state) == [[20, EOS], [30, 31]]
    assert state.history[0, 5:8].tolist() == [20, EOS, 21] and state.root.tolist() == [21, 31]
    assert state.append(acceptance([[22], [32, 33]])).tolist() == [0, 2]  # row 0: a root-only tree
    assert output(state) == [[20, EOS], [30, 31, 32, 33]] and state.history_len.tolist() == [9, 9]
    assert not state.done
    assert state.append(acceptance([[23], [EOS]])).tolist() == [0, 1]  # EOS as the bonus token
    assert state.done and state.active().tolist() == [False, False]
    assert state.sequences().tolist() == [[PAD, PAD, 5, 6, 7, 20, EOS, PAD, PAD, PAD],
                                          [8, 9, 10, 11, 12, 30, 31, 32, 33, EOS]]


def test_max_new_tokens_caps_each_rows_output():
    """A step that accepts past the budget outputs only what fits: an EOS past the cap is not output, one
    within it is."""
    state = begin(max_new_tokens=4)
    state.append(acceptance([[20, 21, 22], [30]]))
    assert state.append(acceptance([[23, EOS, 24], [31, 32, EOS, 33]])).tolist() == [1, 3]
    assert output(state) == [[20, 21, 22, 23], [30, 31, 32, EOS]]
    assert state.num_new.tolist() == [4, 4] and state.done
    assert state.history_len.tolist() == [11, 10]  # every committed token, past the cap too
    assert state.sequences().shape == (2, 5 + 4)


def test_without_eos_ids_only_the_budget_finishes_a_row():
    state = begin(max_new_tokens=3, eos=[])
    assert state.append(acceptance([[EOS, EOS], [EOS]])).tolist() == [2, 1]
    assert not state.finished.any()
    assert state.append(acceptance([[EOS, EOS], [EOS, EOS, EOS]])).tolist() == [1, 2]
    assert state.done and output(state) == [[EOS] * 3, [EOS] * 3]


def test_padding_columns_are_never_read():
    """Only a row's num_accepted + 1 columns count: an EOS id in its padding neither finishes it nor lands in
    its history or output."""
    state = begin()
    acc = acceptance([[20, 21, 22], [30]])
    acc.host_tokens[1, 1:] = EOS
    assert state.append(acc).tolist() == [3, 1]
    assert not state.finished.any() and output(state) == [[20, 21, 22], [30]]
    assert state.history_len.tolist() == [8, 6] and (state.history[1, 6:] == PAD).all()


@pytest.mark.hf
def test_sequences_is_generates_layout_for_a_ragged_batch():
    """Fed the greedy continuations in uneven chunks, with an EOS that finishes row 0 early, the state returns
    exactly what target.generate returns: prompts as given, outputs padded after EOS, the longest row's width."""
    target = make_model("llama")
    ids, mask = ragged_prompts([6, 10, 9], seed=3)
    P = ids.shape[1]
    free = reference(target, ids, mask, 24, eos=None)[:, P:].tolist()  # 4 spare tokens past the budget
    eos = free[0][4]
    expected = reference(target, ids, mask, 20, eos=eos)
    assert (expected[0, P:] == 0).any()  # row 0 is padded after its EOS while another row goes on
    state = DecodeState.begin(ids, (mask == 0).sum(1), max_new_tokens=20, capacity=64, eos_token_ids=[eos],
                              pad_token_id=0)
    used, step = [0, 0, 0], 0
    while not state.done:
        sizes = [0 if state.finished[b] else 1 + (step + b) % 4 for b in range(3)]
        # a finished row's tree is its root alone: it commits one token and outputs nothing
        state.append(acceptance([free[b][used[b]:used[b] + n] or [0] for b, n in enumerate(sizes)]))
        used, step = [u + n for u, n in zip(used, sizes)], step + 1
    assert torch.equal(state.sequences(), expected)


@pytest.mark.hf
def test_max_new_tokens_never_exceeded():
    target = make_model("llama")
    ids, mask = ragged_prompts([6, 9])
    gen = specdec.SpeculativeGenerator(target, specdec.DraftSupplier(target, mode="chain", depth=5))
    for n in (1, 2, 3, 7):
        out = gen.generate(ids, attention_mask=mask, max_new_tokens=n, eos_token_id=[], pad_token_id=0)
        assert out.sequences.shape[1] == ids.shape[1] + n
        assert torch.equal(out.sequences, reference(target, ids, mask, n, eos=None))
