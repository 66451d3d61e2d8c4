"""--temperature, --top-k, --top-p and --seed on `specdec generate` and `specdec bench`."""

from __future__ import annotations

import csv
import json

import pytest

from specdec.app.cli import main

pytestmark = pytest.mark.hf


def sampled(saved, capsys, *extra: str) -> dict:
    root = saved[0]
    argv = ["generate", "--target", str(root / "target"), "--draft", str(root / "draft"), "--method", "chain",
            "--depth", "3", "--prompt", "w5 w6 w7 w5 w6", "--prompt", "w9 w10 w11", "--batch-size", "2",
            "--max-new-tokens", "16", "--device", "cpu", "--json", *extra]
    assert main(argv) == 0
    return json.loads(capsys.readouterr().out)


def test_generate_samples_reproducibly_with_a_seed(saved, capsys):
    a = sampled(saved, capsys, "--temperature", "1.0", "--top-k", "30", "--top-p", "0.95", "--seed", "3")
    b = sampled(saved, capsys, "--temperature", "1.0", "--top-k", "30", "--top-p", "0.95", "--seed", "3")
    c = sampled(saved, capsys, "--temperature", "1.0", "--top-k", "30", "--top-p", "0.95", "--seed", "4")
    greedy = sampled(saved, capsys)
    assert a["results"] == b["results"]
    assert a["results"] != c["results"]
    assert a["results"] != greedy["results"]  # 32 tokens at temperature 1 differ from greedy's somewhere
    assert a["stats"]["new_tokens"] == 32 and a["stats"]["mean_accepted_length"] >= 1.0
    assert a["sampling"] == {"temperature": 1.0, "top_k": 30, "top_p": 0.95, "seed": 3}


@pytest.mark.parametrize("extra, message", [
    (["--temperature", "-1"], "--temperature: expected a finite number >= 0"),
    (["--temperature", "1", "--top-k", "0"], "--top-k: expected None or an int >= 1"),
    (["--temperature", "1", "--top-p", "1.5"], "--top-p: expected None or a number in (0, 1]"),
    (["--temperature", "1", "--seed", "-2"], "--seed: expected an int >= 0"),
])
def test_sampling_flag_errors(saved, capsys, extra, message):
    root = saved[0]
    assert main(["generate", "--target", str(root / "target"), "--prompt", "w3 w4", "--method", "ar", *extra]) == 2
    assert message in capsys.readouterr().err
    assert main(["bench", "--target", str(root / "target"), "--methods", "ar", *extra]) == 2
    assert message in capsys.readouterr().err


def test_bench_records_sampling_and_skips_identity(tmp_path):
    """Sampled runs are draws: bench (on the demo pair) reports speedups, records the sampling in every
    row and leaves identity with AR empty."""
    assert main(["bench", "--methods", "ar", "chain", "--num-prompts", "2", "--batch-sizes", "1", "--max-new-tokens",
                 "6", "--device", "cpu", "--temperature", "1", "--seed", "0", "--out", str(tmp_path), "--prompt-sets",
                 "spec_bench"]) == 0
    (run,) = tmp_path.iterdir()
    rows = list(csv.DictReader(open(run / "results.csv")))
    assert {r["method"] for r in rows} == {"ar", "chain"}
    assert all(r["temperature"] == "1.0" and r["seed"] == "0" and r["identical_to_ar"] == "" for r in rows)
    assert all(float(r["speedup_vs_ar"]) > 0 for r in rows)
