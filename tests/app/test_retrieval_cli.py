"""`specdec datastore build|info`, `specdec generate --method retrieval` and retrieval in `specdec bench`; the
commands' one-line errors."""

from __future__ import annotations

import json
import sysconfig
from pathlib import Path

import pytest

from specdec.app.cli import main
from specdec.demo_pair import pair_path


@pytest.mark.hf
def test_cli_datastore_build_info_generate_and_bench(tmp_path, capsys):
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    out = tmp_path / "store"
    assert main(["datastore", "build", "--tokenizer", "demo-target", "--out", str(out), "--quiet",
                 str(stdlib / "textwrap.py"), str(stdlib / "json")]) == 0
    assert "wrote" in capsys.readouterr().out
    assert main(["datastore", "info", str(out)]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["documents"] >= 5 and info["vocab_size"] == 4096 and info["total_bytes"] > 8 * info["num_tokens"]
    assert main(["generate", "--target", "demo-target", "--method", "retrieval", "--datastore", str(out), "--budget",
                 "8", "--max-new-tokens", "12", "--device", "cpu", "--json", "--prompt",
                 "def dedent(text):\n    "]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["method"] == "retrieval" and doc["stats"]["new_tokens"] == 12
    assert main(["bench", "--methods", "retrieval", "--budgets", "4", "8", "--datastore", str(out), "--num-prompts",
                 "2", "--batch-sizes", "2", "--max-new-tokens", "6", "--device", "cpu",
                 "--out", str(tmp_path / "b")]) == 0
    (run,) = (tmp_path / "b").iterdir()
    doc = json.loads((run / "results.json").read_text())
    assert [r["method"] for r in doc["results"]] == ["ar", "retrieval-4", "retrieval-8"]
    assert all(r["identical_to_ar"] for r in doc["results"])
    assert doc["environment"]["retrieval"]["budgets"] == [4, 8]
    assert max(r["mean_tree_size"] for r in doc["results"]) > 1  # matches happened


@pytest.mark.hf
@pytest.mark.parametrize("argv, message", [
    (["datastore", "info", "{tmp}"], "path: {tmp} holds no datastore"),
    (["datastore", "build", "--tokenizer", "/no/such/tokenizer", "--out", "{tmp}/s", "{tmp}"],
     "--tokenizer: no checkpoint at /no/such/tokenizer"),
    (["datastore", "build", "--tokenizer", "demo-target", "--out", "{tmp}/s", "{tmp}/missing"],
     "sources: no such file or folder"),
    (["generate", "--target", str(pair_path("target")), "--method", "retrieval", "--prompt", "x"],
     "--datastore: method 'retrieval' needs a datastore"),
])
def test_cli_user_errors_are_one_line(tmp_path, capsys, argv, message):
    assert main([a.format(tmp=tmp_path) for a in argv]) == 2
    err = capsys.readouterr().err
    (line,) = [x for x in err.splitlines() if "error" in x]
    assert line.startswith("specdec: error: ") and message.format(tmp=tmp_path) in line and "Traceback" not in err
