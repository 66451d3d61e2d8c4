"""The `specdec generate` command on a tiny saved model and tokenizer."""

from __future__ import annotations

import json

import pytest

from specdec.app.cli import main
from specdec.app.methods import DRAFT_METHODS, names
from tests.helpers import generate_matches_hf

pytestmark = pytest.mark.hf


@pytest.mark.parametrize("method", names(within=["draft"]))  # ar, chain, tree, prompt-lookup
def test_generate_json_matches_hf_generate(saved, capsys, method):
    draft = ["--draft", str(saved[0] / "draft")] if method in DRAFT_METHODS else []
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
