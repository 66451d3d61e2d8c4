"""The `specdec generate` command on a tiny saved model and tokenizer."""

from __future__ import annotations

import json

import pytest
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

from conftest import VOCAB, make_model, perturbed
from specdec.cli import main

pytestmark = pytest.mark.hf


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """A tiny Llama target, a perturbed draft and a word-level tokenizer w0..w95, saved like hub checkpoints."""
    root = tmp_path_factory.mktemp("models")
    vocab = {"<pad>": 0, "<s>": 1, "</s>": 2, **{f"w{i}": i for i in range(3, VOCAB)}}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<pad>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", bos_token="<s>", eos_token="</s>")
    target = make_model("llama")
    for name, model in (("target", target), ("draft", perturbed(target))):
        model.save_pretrained(root / name)
        tokenizer.save_pretrained(root / name)
    return root, target, tokenizer


PROMPTS = ["w5 w6 w7 w5 w6", "w9 w10 w11 w12 w13 w9 w10 w11 w40"]


def generate_matches_hf(saved, capsys, options: list[str]) -> dict:
    """`specdec generate --json` with `options` on two prompts equals HF generate; returns the JSON."""
    root, target, tokenizer = saved
    argv = ["generate", "--target", str(root / "target"), "--max-new-tokens", "12", "--batch-size", "2", "--device",
            "cpu", "--json", *options]
    for p in PROMPTS:
        argv += ["--prompt", p]
    assert main(argv) == 0
    doc = json.loads(capsys.readouterr().out)
    enc = tokenizer(PROMPTS, return_tensors="pt", padding=True, padding_side="left")
    ref = target.generate(**enc, max_new_tokens=12, do_sample=False, pad_token_id=0)
    want = tokenizer.batch_decode(ref[:, enc.input_ids.shape[1]:], skip_special_tokens=True)
    assert [r["completion"] for r in doc["results"]] == want
    return doc


@pytest.mark.parametrize("method", ["ar", "chain", "tree", "prompt-lookup"])
def test_generate_json_matches_hf_generate(saved, capsys, method):
    draft = ["--draft", str(saved[0] / "draft")] if method in ("chain", "tree") else []
    doc = generate_matches_hf(saved, capsys, ["--method", method, "--depth", "3", "--topk", "2", "--total-tokens", "6",
                                              *draft])
    assert doc["stats"]["new_tokens"] > 0 and doc["stats"]["mean_accepted_length"] >= 1.0


def test_generate_text_output_and_prompts_file(saved, capsys, tmp_path):
    root, _, _ = saved
    jsonl = tmp_path / "q.jsonl"
    jsonl.write_text(json.dumps({"turns": ["w3 w4 w5"]}) + "\n" + json.dumps({"prompt": "w7 w8"}) + "\n")
    assert main(["generate", "--target", str(root / "target"), "--method", "ar", "--prompts-file", str(jsonl),
                 "--max-new-tokens", "4", "--device", "cpu"]) == 0
    out = capsys.readouterr().out
    assert "### w3 w4 w5" in out and "### w7 w8" in out and "method ar: " in out


@pytest.mark.parametrize("extra, message", [
    (["--method", "chain"], "--draft: method 'chain' needs a draft model"),
    (["--method", "ar", "--max-new-tokens", "0"], "--max-new-tokens: expected > 0"),
    (["--method", "ar", "--batch-size", "0"], "--batch-size: expected > 0"),
    (["--method", "ar", "--device", "nonsense"], "device: 'nonsense' is not a torch device"),
])
def test_generate_errors(saved, capsys, extra, message):
    root, _, _ = saved
    assert main(["generate", "--target", str(root / "target"), "--prompt", "w3 w4"] + extra) == 2
    assert message in capsys.readouterr().err
