"""The decoding state (`DecodeState`): the output budget it keeps. Its EOS handling is checked end to end by
tests/core/test_generate.py's identity tests."""

from __future__ import annotations

import pytest
import torch

import specdec
from tests.helpers import make_model, ragged_prompts, reference


@pytest.mark.hf
def test_max_new_tokens_never_exceeded():
    target = make_model("llama")
    ids, mask = ragged_prompts([6, 9])
    gen = specdec.SpeculativeGenerator(target, specdec.DraftSupplier(target, mode="chain", depth=5))
    for n in (1, 2, 3, 7):
        out = gen.generate(ids, attention_mask=mask, max_new_tokens=n, eos_token_id=[], pad_token_id=0)
        assert out.sequences.shape[1] == ids.shape[1] + n
        assert torch.equal(out.sequences, reference(target, ids, mask, n, eos=None))
