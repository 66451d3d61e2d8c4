"""The command line with EAGLE heads: `generate --method eagle|eagle-chain --eagle PATH`, `bench` with
shapes, chain depths, ValuSpec and interleaved rounds, `train-eagle`, and their one-line user errors."""

from __future__ import annotations

import json

import pytest
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

import specdec
from specdec.app.cli import main
from specdec.app.methods import names
from tests.eagle_helpers import eagle_target, head_tensors, write_head
from tests.helpers import VOCAB, generate_matches_hf

pytestmark = pytest.mark.hf
PROMPTS = ["w5 w6 w7 w5 w6", "w9 w10 w11 w12 w13 w9 w10 w11 w40"]


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """A tiny 7-layer Llama target with a word-level tokenizer w0..w95, a perturbed copy as scorer, and a
    random EAGLE-3 head for it, saved as files."""
    root = tmp_path_factory.mktemp("eagle-cli")
    vocab = {"<pad>": 0, "<s>": 1, "</s>": 2, **{f"w{i}": i for i in range(3, VOCAB)}}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<pad>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", bos_token="<s>", eos_token="</s>")
    target = eagle_target("llama")
    for name, model in (("target", target), ("draft", eagle_target("llama", seed=3))):
        model.save_pretrained(root / name)
        tokenizer.save_pretrained(root / name)
    write_head(root / "head", *head_tensors(target, "eagle3"))
    return root, target, tokenizer


@pytest.mark.parametrize("method", names(needing=["eagle"], within=["eagle"]))  # eagle, eagle-chain
def test_generate_matches_hf_generate(saved, capsys, method):
    root, _, _ = saved
    doc = generate_matches_hf(saved, capsys, ["--method", method, "--eagle", str(root / "head"), "--depth", "3",
                                              "--topk", "2", "--total-tokens", "6"], PROMPTS)
    assert doc["method"] == method and doc["stats"]["mean_tree_size"] > 1


@pytest.mark.parametrize("extra, message", [
    (["--method", "eagle"], "--eagle: method 'eagle' needs an EAGLE head trained for the target"),
    (["--method", "eagle", "--eagle", "/nonexistent/head"], "--eagle: path: /nonexistent/head is not a directory"),
    (["--method", "eagle", "--eagle", "{root}/target"], "--eagle: architecture: unknown EAGLE layout"),
])
def test_generate_errors_are_one_line(saved, capsys, extra, message):
    root, _, _ = saved
    extra = [e.replace("{root}", str(root)) for e in extra]
    assert main(["generate", "--target", str(root / "target"), "--prompt", "w3 w4", "--device", "cpu"] + extra) == 2
    err = capsys.readouterr().err.splitlines()
    assert err[-1].startswith("specdec: error: ") and message in err[-1]


def test_bench_shapes_chains_valuspec_interleaved(saved, tmp_path):
    root, _, _ = saved
    assert main(["bench", "--target", str(root / "target"), "--draft", str(root / "draft"), "--eagle", str(root / "head"),
                 "--methods", "ar", "eagle", "eagle-chain", "--eagle-shapes", "3:2:5", "4:2:7", "--eagle-chain-depths",
                 "2", "--valuspec-methods", "eagle-3x2x5", "--calibration-size", "2", "--num-prompts", "2",
                 "--batch-sizes", "1", "2", "--max-new-tokens", "6", "--repeats", "2",
                 "--prompt-sets", "spec_bench", "--device", "cpu", "--out", str(tmp_path)]) == 0
    (run,) = tmp_path.iterdir()
    doc = json.loads((run / "results.json").read_text())
    labels = {(r["method"], r["batch_size"]) for r in doc["results"]}
    assert labels == {(m, b) for m in ("ar", "eagle-3x2x5", "eagle-4x2x7", "eagle-chain", "eagle-3x2x5+valuspec")
                      for b in (1, 2)}
    assert all(r["identical_to_ar"] and r["repeats"] == 2 for r in doc["results"])
    rounds = {(r["method"], r["batch_size"]): json.loads(r["speedup_by_round"]) for r in doc["results"]}
    assert all(len(v) == 2 and min(v) > 0 for v in rounds.values()) and rounds[("ar", 1)] == [1.0, 1.0]
    assert all(r["mean_tree_size"] <= 7 for r in doc["results"] if r["method"].startswith("eagle"))
    env = doc["environment"]
    assert env["eagle"]["runs"]["eagle-4x2x7"] == [4, 2, 7]
    assert env["eagle"]["feature_layers"] == [2, 3, 4]
    assert all(set(json.loads(r["stage_seconds"])) >= {"propose", "verify"} for r in doc["results"])


def test_bench_runs_eagle_smart_variants(saved, tmp_path):
    """--smart-variants applies to eagle-smart as to smart: one run per variant, each with its options."""
    root, _, _ = saved
    assert main(["bench", "--target", str(root / "target"), "--eagle", str(root / "head"), "--methods", "ar",
                 "eagle-smart", "--smart-variants", "default", "budget=3,planner=0", "--num-prompts", "2",
                 "--batch-sizes", "1", "2", "--max-new-tokens", "6", "--prompt-sets", "spec_bench", "--device", "cpu",
                 "--out", str(tmp_path)]) == 0
    (run,) = tmp_path.iterdir()
    doc = json.loads((run / "results.json").read_text())
    labels = {(r["method"], r["batch_size"]) for r in doc["results"]}
    assert labels == {(m, b) for m in ("ar", "eagle-smart", "eagle-smart[budget=3,planner=0]") for b in (1, 2)}
    assert all(r["identical_to_ar"] for r in doc["results"])
    variant = [r for r in doc["results"] if r["method"] == "eagle-smart[budget=3,planner=0]"]
    assert all(r["mean_tree_size"] <= 3 and r["steps_ar"] == 0 for r in variant)


def test_train_eagle_writes_a_loadable_head(saved, tmp_path, capsys):
    root, target, _ = saved
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "a.txt").write_text(" ".join(f"w{3 + (i * 7) % 90}" for i in range(400)))
    argv = ["train-eagle", "--target", str(root / "target"), "--out", str(tmp_path / "head"), str(corpus),
            "--steps", "4", "--batch-size", "2", "--seq-len", "24", "--prompt-len", "8", "--num-sequences", "4",
            "--draft-vocab", "50", "--device", "cpu", "--quiet"]
    assert main(argv + ["--stop-at", "2"]) == 0
    assert "checkpointed: 2/4 steps" in capsys.readouterr().out
    assert main(argv) == 0
    assert "wrote" in capsys.readouterr().out
    head = specdec.EagleHead.from_pretrained(tmp_path / "head", target)
    config = json.loads((tmp_path / "head" / "config.json").read_text())
    assert head.config.draft_vocab_size == 50 and config["eagle_aux_hidden_state_layer_ids"] == [2, 3, 4]
    assert 0.05 <= config["specdec_greedy_temperature"] <= 2.0  # fitted on fresh continuations at the end


@pytest.mark.parametrize("extra, message", [
    (["--seq-len", "10"], "--seq-len: 10 leaves no room after prompt_len 32"),
    (["--steps", "0"], "--steps: expected an int >= 1, got 0"),
    (["--lr", "-1"], "--lr: expected a number > 0, got -1.0"),
    (["--stop-at", "0"], "--stop-at: expected an int >= 1"),
])
def test_train_eagle_errors_name_the_flag(saved, tmp_path, capsys, extra, message):
    root, _, _ = saved
    assert main(["train-eagle", "--target", str(root / "target"), "--out", str(tmp_path / "h"), str(tmp_path)]
                + extra) == 2
    assert message in capsys.readouterr().err
