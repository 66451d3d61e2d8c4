"""Every bad command line is one line on stderr with exit status 2 naming the flag (Ctrl-C: 130), checked
before any work."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from specdec import profiling
from specdec.app.cli import main
from specdec.profiling import FORMAT_VERSION
from tests.helpers import assert_one_line_error, run_cli

pytestmark = pytest.mark.hf


@pytest.fixture()
def files(saved, tmp_path):
    """Bad inputs on disk: prompt files, a truncated checkpoint, an empty folder, profiles."""
    root = saved[0]
    texts = {"list.jsonl": "[1, 2]\n", "turns5.jsonl": '{"turns": 5}\n', "empty.txt": "", "blank.txt": "\n   \n",
             "turnstr.jsonl": '{"turns": "Write a haiku"}\n', "ok.txt": "w3 w4\n"}
    for name, text in texts.items():
        (tmp_path / name).write_text(text)
    shutil.copytree(root / "target", tmp_path / "truncated")
    weights = tmp_path / "truncated" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    (tmp_path / "emptydir").mkdir()
    (tmp_path / "afile").write_text("x")
    doc = {"format": "specdec-profile", "version": FORMAT_VERSION, "device": "cpu", "dtype": "float32", "target": "",
           "draft": None, "context_len": 16, "batch_sizes": [1], "sizes": [1, 2, 4], "repeats": 1,
           "verify_seconds": [[1.0, 1.1, 1.2]], "short_context": 8, "context_sizes": [1, 2],
           "context_seconds": [[0.9, 1.0]], "ar_step_seconds": [1.1], "draft_seconds": None, "backlogs": [1, 2],
           "catch_up_seconds": None}
    (tmp_path / "sizes5.json").write_text(json.dumps({**doc, "sizes": 5}))
    (tmp_path / "repeatsnull.json").write_text(json.dumps({**doc, "repeats": None}))
    return root, tmp_path


def generate_args(root: Path, *extra) -> list:
    return ["generate", "--target", root / "target", "--method", "ar", "--max-new-tokens", "3", "--device", "cpu",
            *extra]


@pytest.mark.parametrize("extra, prefix", [
    (["--device", "cuda", "--prompt", "w3"], "--device: 'cuda' is not available"),
    (["--prompts-file", "{tmp}/list.jsonl"], "--prompts-file: {tmp}/list.jsonl line 1 is a JSON list"),
    (["--prompts-file", "{tmp}/turns5.jsonl"], "--prompts-file: {tmp}/turns5.jsonl line 1 has no 'prompt' string"),
    (["--prompts-file", "{tmp}/turnstr.jsonl"], "--prompts-file: {tmp}/turnstr.jsonl line 1 has no 'prompt' string"),
    (["--prompts-file", "{tmp}/empty.txt"], "--prompts-file: {tmp}/empty.txt holds no prompt"),
    (["--prompts-file", "{tmp}/blank.txt"], "--prompts-file: {tmp}/blank.txt holds no prompt"),
    (["--prompt", "w3", "--audit"], "--audit: has no effect without --valuspec"),
    (["--prompt", "w3", "--target", "{tmp}/truncated"], "--target: cannot load"),
    (["--prompt", "w3", "--target", "{tmp}/emptydir"], "--target: {tmp}/emptydir holds no tokenizer"),
    (["--prompt", "w3", "--target", "no-such-dir/model"], "--target: no folder 'no-such-dir/model' here"),
    (["--prompt", "w3", "--target", "a/b/c"], "--target: no checkpoint at a/b/c"),
    (["--prompt", "w3", "--method", "smart", "--draft", "{root}/draft", "--profile", "{tmp}/sizes5.json"],
     "--profile: profile {tmp}/sizes5.json: sizes: expected at least 3 increasing positive ints"),
    (["--prompt", "w3", "--method", "smart", "--draft", "{root}/draft", "--profile", "{tmp}/repeatsnull.json"],
     "--profile: profile {tmp}/repeatsnull.json: repeats must be a positive int"),
    (["--prompt", "w3", "--method", "chain", "--draft", "{root}/draft", "--depth", "300"], "--depth: 300 exceeds"),
    (["--prompt", "w3", "--method", "tree", "--draft", "{root}/draft", "--total-tokens", "100000"],
     "--total-tokens: 100000 exceeds"),
])
def test_generate_bad_input_is_one_line(files, capsys, monkeypatch, extra, prefix):
    root, tmp = files
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # a hub id not cached here fails at once, network or not
    fill = lambda s: str(s).format(tmp=tmp, root=root)  # noqa: E731
    assert_one_line_error(capsys, generate_args(root, *map(fill, extra)), fill(prefix))


@pytest.mark.parametrize("argv, prefix", [
    (["generate", "--depth", "x"], "argument --depth: invalid int value: 'x' (see specdec generate --help)"),
    (["profile", "--out", "p.json"], "the following arguments are required: --target (see specdec profile --help)"),
])
def test_malformed_flags_are_one_line_too(capsys, argv, prefix):
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    lines = capsys.readouterr().err.strip().split("\n")
    assert exit_.value.code == 2 and lines == [f"specdec: error: {prefix}"]


def test_a_draft_with_another_tokenizer_is_refused(saved, tmp_path, capsys):
    root = saved[0]
    shutil.copytree(root / "draft", tmp_path / "draft")
    vocab = json.loads((tmp_path / "draft" / "tokenizer.json").read_text())
    vocab["model"]["vocab"] = {k.replace("w", "v"): i for k, i in vocab["model"]["vocab"].items()}
    (tmp_path / "draft" / "tokenizer.json").write_text(json.dumps(vocab))
    argv = generate_args(root, "--method", "chain", "--draft", tmp_path / "draft", "--prompt", "w3")
    assert_one_line_error(capsys, argv, "--draft: ")


@pytest.mark.parametrize("argv, prefix", [
    (["demo", "--prompts", "0"], "--prompts: expected > 0"),
    (["demo", "--device", "cuda"], "--device: 'cuda' is not available"),
    (["bench", "--out", "{tmp}/afile"], "--out: {tmp}/afile exists and is not a folder"),
    (["calibrate", "--target", "{root}/target", "--scorer", "{root}/draft", "--prompts", "{tmp}/ok.txt", "--out",
      "{tmp}"], "--out: {tmp} is a folder"),
    (["profile", "--target", "{root}/target", "--out", "/missing-folder/p.json"], "--out: no folder /missing-folder"),
    (["profile", "--target", "{root}/target", "--out", "{tmp}/p.json", "--sizes", "1,2"], "--sizes: the fit needs"),
    (["datastore", "build", "--tokenizer", "{root}/target", "--out", "{tmp}/afile", "{tmp}/ok.txt"],
     "--out: {tmp}/afile exists and is not a folder"),
])
def test_other_commands_check_before_any_work(files, capsys, argv, prefix):
    root, tmp = files
    fill = lambda s: str(s).format(tmp=tmp, root=root)  # noqa: E731
    assert_one_line_error(capsys, list(map(fill, argv)), fill(prefix))


def test_ctrl_c_is_one_line_and_leaves_no_partial_file(saved, tmp_path, capsys, monkeypatch):
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(profiling, "_timed", interrupted)
    out = tmp_path / "p.json"
    code, lines = run_cli(capsys, ["profile", "--target", saved[0] / "target", "--out", out, "--device", "cpu",
                                   "--sizes", "1,2,4", "--batch-sizes", "1", "--context-len", "8", "--repeats", "1"])
    assert code == 130 and lines == ["specdec: interrupted"] and not out.exists()
    from specdec import records

    out.write_text("old")  # a write interrupted after its data, before the switch: the old file stays
    monkeypatch.setattr(records.os, "fsync", interrupted)
    with pytest.raises(KeyboardInterrupt):
        records.atomic_write_text(out, "new")
    assert out.read_text() == "old" and [p.name for p in tmp_path.iterdir()] == ["p.json"]
