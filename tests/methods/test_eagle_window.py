"""A cold EAGLE head's window (`suppliers.eagle`): until its first catch-up in a call it keeps only the newest
`window` pairs of each row's queue (prompt and plain steps), and that catch-up computes what the head computes
over exactly those pairs; a warm head reads every pair; output identity with generate(do_sample=False) at
windows down to one pair, under EagleSupplier and SMART; bad windows are refused."""

from __future__ import annotations

import pytest
import torch

import specdec
from specdec.suppliers.eagle import EagleRunner
from tests.eagle_helpers import eagle_target, first_verification, head_tensors, write_head
from tests.helpers import MODERATE, fixed_cost, generate_with, plan_schedule, ragged_prompts, reference


def random_head(tmp_path, target):
    return specdec.EagleHead.from_pretrained(write_head(tmp_path / "eagle3", *head_tensors(target, "eagle3")), target)


def two_acceptances(target, head, ids, mask):
    """The decode state and the first two verifications' acceptances (prompt block, then a chain of four)."""
    state, verifier, cache, first = first_verification(target, head, ids, mask, max_new_tokens=16, room=60)
    greedy = reference(target, ids, mask, 4, eos=[])[:, ids.shape[1]:]
    chain = torch.cat([first.tokens[:, :1], greedy[:, 1:3], torch.full((ids.shape[0], 1), 7)], 1)
    second = verifier.verify(specdec.TreeBatch.chain(chain, torch.full((ids.shape[0],), 4)), cache)
    return state, [first, second]


def runner(head, target, state, window):
    r = EagleRunner(head, window=window)
    r.attach(target)
    r.start(state, region=16)
    return r


@pytest.mark.hf
def test_a_cold_head_reads_the_newest_pairs_and_a_warm_one_every_pair(tmp_path):
    target = eagle_target("llama")
    head = random_head(tmp_path, target)
    ids, mask = ragged_prompts([6, 11], seed=2)
    state, accs = two_acceptances(target, head, ids, mask)
    full, windowed = runner(head, target, state, None), runner(head, target, state, 3)
    for r in (full, windowed):
        for acc in accs:
            r.commit(acc)
    assert full.backlog.min() > 3 and windowed.backlog.tolist() == [3, 3]
    tok, feat, count = full._pack()
    keep = [torch.arange(n - 3, n) for n in count.tolist()]  # each row's newest three pairs, in order
    newest_tok = torch.stack([tok[b, k] for b, k in enumerate(keep)])
    newest_feat = torch.stack([feat[b, k] for b, k in enumerate(keep)])
    w_tok, w_feat, w_count = windowed._pack()
    assert torch.equal(w_tok, newest_tok) and torch.equal(w_feat, newest_feat) and w_count.tolist() == [3, 3]
    # the reference: a head that was only ever given those pairs
    only = runner(head, target, state, None)
    only._chunks = [(newest_tok, newest_feat, torch.zeros(2, dtype=torch.int64), torch.full((2,), 3))]
    only.backlog[:] = 3
    torch.testing.assert_close(windowed.catch_up(), only.catch_up(), rtol=1e-5, atol=1e-5)
    assert not windowed.cold and windowed.backlog.tolist() == [0, 0]
    windowed.commit(accs[1])
    windowed.commit(accs[1])  # warm: nothing is dropped, however long the queue
    assert windowed.backlog.tolist() == (2 * (accs[1].host_num_accepted + 1)).tolist()
    assert windowed.backlog.max() > 3


@pytest.mark.hf
@pytest.mark.parametrize("window", [1, 2, 5])
def test_identity_with_a_window(tmp_path, window):
    """Windows shorter than the prompts (and than the plain stretches SMART takes before its first drafting
    step): the head drafts from fewer pairs, the output is the target's greedy output."""
    target = eagle_target("llama")
    head = random_head(tmp_path, target)
    ids, mask = ragged_prompts([6, 11, 9], seed=4)
    ref = reference(target, ids, mask, 20, eos=[])
    out = generate_with(target, specdec.EagleSupplier(head, depth=4, topk=3, total_tokens=10, window=window),
                        ids, mask, 20, [])
    assert torch.equal(out.sequences, ref)
    sup = specdec.SmartSupplier(head, fixed_cost(**MODERATE, batch_size=3), topk=2, frontier=2, max_depth=4,
                                online=False, window=window)
    backlogs = plan_schedule(sup, [0, 0, 0, 0, 3, 0, 0, 2, 0, 0, 0, 0, 0, 0, 4])
    out = generate_with(target, sup, ids, mask, 20, [])
    assert torch.equal(out.sequences, ref)
    assert max(backlogs[1:5]) == window  # cold: the planner prices the window, not the whole prompt
    assert max(backlogs[5:]) > window  # warm: a plain stretch's every pair


@pytest.mark.parametrize("window", [0, -2, 1.5, "8", True])
def test_a_bad_window_is_refused(tmp_path, window):
    target = eagle_target("llama")
    head = random_head(tmp_path, target)
    with pytest.raises((ValueError, TypeError), match="window"):
        specdec.EagleSupplier(head, window=window)
    with pytest.raises((ValueError, TypeError), match="window"):
        specdec.SmartSupplier(head, fixed_cost(**MODERATE), window=window)
