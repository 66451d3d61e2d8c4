"""Bad input: a ValueError naming the argument, raised before any cache or sequence changes."""

from __future__ import annotations

import pytest
import torch

import specdec
from tests.helpers import make_model, ragged_prompts


@pytest.fixture(scope="module")
def target():
    return make_model("llama")


@pytest.mark.parametrize("kwargs, match", [
    (dict(max_new_tokens=0), "max_new_tokens: expected an int > 0"),
    (dict(max_new_tokens=-3), "max_new_tokens: expected an int > 0"),
    (dict(max_new_tokens=250), "max_new_tokens: a 7-token prompt plus 250 new tokens exceeds the model's 256"),
    (dict(attention_mask=torch.tensor([[1, 1, 0, 1, 1, 1, 1], [0] * 7])), "attention_mask: row 0 is not left-padded"),
    (dict(attention_mask=torch.ones(2, 6, dtype=torch.int64)), r"attention_mask: expected \(2, 7\)"),
    (dict(input_ids=torch.full((2, 7), 400)), r"input_ids: token ids outside the target's vocabulary \[0, 96\)"),
    (dict(input_ids=torch.ones(2, 7, dtype=torch.int32)), "input_ids: expected int64"),
    (dict(input_ids=torch.ones(7, dtype=torch.int64)), r"input_ids: expected a \[B, P\] tensor"),
    (dict(input_ids=torch.ones(2, 7, dtype=torch.int64, device="meta")), "input_ids: on meta"),
])
def test_generate_argument_errors_then_generator_still_works(target, kwargs, match):
    gen = specdec.SpeculativeGenerator(target, specdec.DraftSupplier(target, mode="chain", depth=3))
    ids, mask = ragged_prompts([7, 4])
    args = dict(input_ids=ids, attention_mask=mask, max_new_tokens=5, pad_token_id=0)
    args.update(kwargs)
    with pytest.raises((ValueError, TypeError), match=match):
        gen.generate(**args)
    good = gen.generate(ids, attention_mask=mask, max_new_tokens=5, pad_token_id=0, eos_token_id=[])
    ref = target.generate(ids, attention_mask=mask, max_new_tokens=5, do_sample=False, pad_token_id=0, eos_token_id=None)
    assert torch.equal(good.sequences, ref)


def test_prompt_longer_than_positions(target):
    gen = specdec.SpeculativeGenerator(target, specdec.ARSupplier())
    with pytest.raises(ValueError, match="max_new_tokens: a 300-token prompt"):
        gen.generate(torch.full((1, 300), 5), max_new_tokens=1)


@pytest.mark.parametrize("kwargs, match", [
    (dict(mode="beam"), "mode: expected 'chain' or 'tree'"),
    (dict(depth=0), "depth: expected an int >= 1"),
    (dict(topk=0), "topk: expected an int >= 1"),
    (dict(total_tokens=1), "total_tokens: expected an int >= 2"),
    (dict(topk=500), "topk: 500 exceeds the draft's vocabulary of 96"),
])
def test_draft_supplier_arguments(target, kwargs, match):
    with pytest.raises(ValueError, match=match):
        specdec.DraftSupplier(target, **kwargs)


@pytest.mark.parametrize("kwargs, match", [
    (dict(max_ngram=0), "max_ngram: expected an int >= 1"),
    (dict(min_ngram=4, max_ngram=2), "min_ngram: 4 exceeds max_ngram 2"),
    (dict(num_pred=0), "num_pred: expected an int >= 1"),
])
def test_prompt_lookup_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        specdec.PromptLookupSupplier(**kwargs)


def test_supplier_type():
    with pytest.raises(TypeError, match="supplier: expected a specdec Supplier"):
        specdec.SpeculativeGenerator(make_model("llama"), supplier="chain")


def test_draft_on_another_device(target):
    draft = make_model("llama").to("meta")
    with pytest.raises(ValueError, match="draft: on meta, the target on cpu"):
        specdec.SpeculativeGenerator(target, specdec.DraftSupplier(draft))
