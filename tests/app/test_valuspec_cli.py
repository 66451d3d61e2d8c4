"""`specdec calibrate`, and `specdec generate` with ValuSpec's filter (--valuspec, --fixed-threshold, a profile
for its cost gate) on tiny saved models; the flags' one-line errors."""

from __future__ import annotations

import json
import re
from dataclasses import replace

import pytest
from transformers import AutoModelForCausalLM

import specdec
from specdec.calibration import Calibration, calibrate
from specdec.app.cli import main
from specdec.gate import CostGate
from tests.helpers import generate_matches_hf


@pytest.mark.hf
def test_cli_calibrate_then_generate_with_the_filter(saved, tmp_path, capsys):
    root, target, tokenizer = saved
    prompts = ["w5 w6 w7 w5 w6", "w9 w10 w11 w12 w13 w9 w10 w11 w40"]
    (tmp_path / "p.txt").write_text("\n".join(prompts) + "\n")
    cal_path = tmp_path / "cal.json"
    assert main(["calibrate", "--target", str(root / "target"), "--scorer", str(root / "draft"), "--prompts",
                 str(tmp_path / "p.txt"), "--max-new-tokens", "12", "--window", "3", "--delta", "0.5",
                 "--out", str(cal_path), "--device", "cpu", "--quiet"]) == 0
    assert "tau" in capsys.readouterr().out
    cal = Calibration.load(cal_path)
    scorer = AutoModelForCausalLM.from_pretrained(root / "draft").eval()
    api = calibrate(target, scorer, prompts, tokenizer=tokenizer, max_new_tokens=12, window=3, delta=0.5)
    assert cal == replace(api, target=str(root / "target"))  # the in-memory target has no checkpoint name
    assert len(cal.taus) == 12  # a tau for every length up to max_new_tokens
    enc = tokenizer(prompts, return_tensors="pt", padding=True, padding_side="left")
    want = tokenizer.batch_decode(target.generate(**enc, max_new_tokens=12, do_sample=False, pad_token_id=0)[
        :, enc.input_ids.shape[1]:], skip_special_tokens=True)
    for extra in (["--method", "tree", "--draft", str(root / "draft"), "--valuspec", str(cal_path), "--audit"],
                  ["--method", "prompt-lookup", "--valuspec", str(cal_path), "--scorer", str(root / "draft"),
                   "--single-tau", "--valuspec-unit", "branch"],
                  ["--method", "prompt-lookup", "--scorer", str(root / "draft"), "--fixed-threshold", "0.5",
                   "--valuspec-unit", "prefix"]):
        argv = ["generate", "--target", str(root / "target"), "--max-new-tokens", "12", "--batch-size", "2",
                "--device", "cpu", "--json", "--depth", "3", "--topk", "2", "--total-tokens", "6"]
        assert main(argv + extra + [a for p in prompts for a in ("--prompt", p)]) == 0
        doc = json.loads(capsys.readouterr().out)
        assert [r["completion"] for r in doc["results"]] == want
        f = doc["stats"]["filter"]
        assert f["rows"] == sum(doc["stats"]["accepted_histogram"].values()) > 0  # every row-step went through it
        assert (f["audited"] == f["rows"]) == ("--audit" in extra) and 0 <= f["node_keep_rate"] <= 1


@pytest.mark.hf
@pytest.mark.parametrize("extra, message", [
    (["--valuspec", "BAD"], "calibration file: .* is not JSON"),
    (["--fixed-threshold", "0.5"], "--scorer: ValuSpec needs a scorer model"),
    (["--fixed-threshold", "1.5", "--scorer", "DRAFT"], r"probability: expected a number in \(0, 1\]"),
])
def test_cli_filter_errors(saved, tmp_path, capsys, extra, message):
    root, _, _ = saved
    (tmp_path / "bad.json").write_text("{")
    extra = [{"BAD": str(tmp_path / "bad.json"), "DRAFT": str(root / "draft")}.get(a, a) for a in extra]
    assert main(["generate", "--target", str(root / "target"), "--prompt", "w3 w4", "--method", "ar",
                 "--device", "cpu"] + extra) == 2
    last = capsys.readouterr().err.strip().splitlines()[-1]  # (model loading may print progress bars before it)
    assert last.startswith("specdec: error: ") and re.search(message, last), last


@pytest.mark.hf
def test_cli_calibrate_errors(saved, capsys):
    root, _, _ = saved
    assert main(["calibrate", "--target", str(root / "target"), "--scorer", str(root / "draft"), "--prompts",
                 "no-such-set", "--out", "x.json"]) == 2
    assert "--prompts: 'no-such-set' is neither a prompt set" in capsys.readouterr().err


@pytest.mark.hf
def test_generate_gates_scoring_with_a_profile_at_hand(saved, profiled, capsys, tmp_path, monkeypatch):
    """`specdec generate --valuspec ... --profile P`: the filter's gate is a CostGate over P, asked before
    every step with candidates; the output still equals HF generate."""
    root = saved[0]
    cal = specdec.Calibration(taus=(-3.0, -2.5), num_windows=(4, 3), window=2, delta=0.05, target=str(root / "target"),
                              scorer=str(root / "draft"), num_prompts=2, max_new_tokens=12)
    cal.save(tmp_path / "cal.json")
    asked = []
    plan = CostGate.plan
    monkeypatch.setattr(CostGate, "plan", lambda self, tree, state: asked.append(tree.size) or plan(self, tree, state))
    options = ["--method", "tree", "--draft", str(root / "draft"), "--depth", "3", "--topk", "2", "--total-tokens",
               "6", "--valuspec", str(tmp_path / "cal.json")]
    doc = generate_matches_hf(saved, capsys, options + ["--profile", str(profiled / "p.json")])
    f = doc["stats"]["filter"]
    assert len(asked) == f["steps"] > 0 and 0 <= f["steps_unscored"] <= f["steps"]
    asked.clear()
    generate_matches_hf(saved, capsys, options)  # no profile: no gate
    assert asked == []
