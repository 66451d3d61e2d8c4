"""`specdec profile`, `specdec generate --method smart` and SMART in `specdec bench`, on tiny saved models."""

from __future__ import annotations

import inspect
import json

import pytest

from specdec import SmartSupplier
from specdec.app import harness
from specdec.app.cli import main
from specdec.app.parser import TREE_TOPK
from specdec.cost import CostModel
from specdec.profiling import Profile
from tests.helpers import generate_matches_hf

pytestmark = pytest.mark.hf


def test_profile_writes_a_valid_profile_and_plot(profiled, saved):
    root, _, _ = saved
    prof = Profile.load(profiled / "p.json")
    assert prof.batch_sizes == (1, 2) and prof.sizes == (1, 2, 4, 8) and prof.context_len == 16
    assert prof.target == str(root / "target") and prof.draft == str(root / "draft")
    assert CostModel.fit(prof, 2).batch_rule == "profiled"
    assert (profiled / "fit.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("extra", [[], ["--alpha", "1.0", "--benefit", "expected", "--budget", "6", "--padding-aware"]])
def test_generate_smart_matches_hf_generate(saved, profiled, capsys, extra):
    root = saved[0]
    doc = generate_matches_hf(saved, capsys, ["--draft", str(root / "draft"), "--method", "smart", "--profile",
                                              str(profiled / "p.json"), "--topk", "3", "--frontier", "2",
                                              "--max-depth", "4", *extra])
    if extra:
        assert doc["stats"]["mean_tree_size"] <= 6


@pytest.mark.parametrize("given", [False, True])
def test_generate_smart_keeps_the_suppliers_tree_shape_unless_given(saved, profiled, capsys, monkeypatch, given):
    """Without --topk / --frontier, `generate --method smart` builds SmartSupplier with its own defaults (the
    tree methods' --topk of 4 is not SMART's); given, they reach it; the static tree still gets 4."""
    built = []
    real = harness.make_supplier
    monkeypatch.setattr(harness, "make_supplier", lambda *a, **k: built.append(real(*a, **k)) or built[-1])
    root = saved[0]
    shape = ["--topk", "3", "--frontier", "1"] if given else []
    generate_matches_hf(saved, capsys, ["--draft", str(root / "draft"), "--method", "smart", "--profile",
                                        str(profiled / "p.json"), "--max-depth", "4", *shape])
    defaults = inspect.signature(SmartSupplier).parameters
    want = (3, 1) if given else (defaults["topk"].default, defaults["frontier"].default)
    assert (built[-1].topk, built[-1].frontier) == want
    generate_matches_hf(saved, capsys, ["--draft", str(root / "draft"), "--method", "tree", "--depth", "3"])
    assert built[-1].topk == TREE_TOPK


@pytest.mark.parametrize("args, message", [
    (["--method", "smart", "--draft", "{root}/draft", "--profile", "{root}/missing.json"], "profile: no file at"),
    (["--method", "smart"], "--draft: method 'smart' needs a draft model"),
    (["--method", "ar", "--prompts-file", "{root}/none.txt"], "--prompts-file: no file at"),
    (["--method", "ar", "--target", "{root}/no-such-model"], "--target: no checkpoint at"),
])
def test_user_errors_are_one_line(saved, capsys, args, message):
    root, _, _ = saved
    args = [a.format(root=root) for a in args]
    argv = ["generate", "--target", str(root / "target"), "--device", "cpu"] + args
    if "--prompts-file" not in args:
        argv += ["--prompt", "w3 w4"]
    assert main(argv) == 2
    err = capsys.readouterr().err  # transformers' loading bars may come first
    assert err.endswith("\n") and message in err.splitlines()[-1] and err.splitlines()[-1].startswith("specdec: error:")
    assert "Traceback" not in err and err.count("specdec: error") == 1


def test_bench_runs_tree_sizes_and_smart_variants(saved, profiled, tmp_path):
    root, _, _ = saved
    assert main(["bench", "--target", str(root / "target"), "--draft", str(root / "draft"), "--num-prompts", "2",
                 "--batch-sizes", "1", "2", "--max-new-tokens", "6", "--methods", "ar", "tree", "smart",
                 "--tree-sizes", "4", "6", "--smart-variants", "default", "alpha=0.5,budget=8", "--profile",
                 str(profiled / "p.json"), "--prompt-sets", "spec_bench", "--device", "cpu", "--out", str(tmp_path),
                 "--depth", "3", "--topk", "2"]) == 0
    (run,) = tmp_path.iterdir()
    doc = json.loads((run / "results.json").read_text())
    labels = {(r["method"], r["batch_size"]) for r in doc["results"]}
    assert labels == {(m, b) for m in ("ar", "tree-4", "tree-6", "smart", "smart[alpha=0.5,budget=8]") for b in (1, 2)}
    assert all(r["identical_to_ar"] for r in doc["results"])
    assert all(r["mean_tree_size"] <= 8 for r in doc["results"] if r["method"] == "smart[alpha=0.5,budget=8]")
    assert doc["environment"]["smart"]["variants"] == ["default", "alpha=0.5,budget=8"]
    assert (run / "cost_fit.png").is_file()
    with pytest.raises(SystemExit):  # argparse rejects an unknown method before anything runs
        main(["bench", "--methods", "smartest"])


def test_bench_control_runs_ar_again_beside_it(saved, tmp_path):
    """--control adds ar-control: AR measured a second time, right after AR in each round, so its speedup
    over AR (every round's own ratio too) is the cell's noise floor; its output is AR's."""
    root, _, _ = saved
    assert main(["bench", "--target", str(root / "target"), "--num-prompts", "2", "--batch-sizes", "1", "2",
                 "--max-new-tokens", "5", "--methods", "ar", "--control", "--repeats", "2", "--prompt-sets",
                 "spec_bench", "--device", "cpu", "--out", str(tmp_path)]) == 0
    (run,) = tmp_path.iterdir()
    rows = json.loads((run / "results.json").read_text())["results"]
    for r in rows:  # lists are kept as JSON text in a row (as in results.csv)
        r.update({k: json.loads(r[k]) for k in ("round_seconds", "speedup_by_round")})
    assert [(r["method"], r["batch_size"]) for r in rows] == [(m, b) for b in (1, 2) for m in ("ar", "ar-control")]
    for r in rows:
        assert r["identical_to_ar"] and r["mean_accepted_length"] == 1.0 and len(r["round_seconds"]) == 2
        assert len(r["speedup_by_round"]) == 2 and all(x > 0 for x in r["speedup_by_round"])
    ar = {r["batch_size"]: r for r in rows if r["method"] == "ar"}
    assert all(r["speedup_vs_ar"] == 1.0 and r["speedup_by_round"] == [1.0, 1.0] for r in ar.values())
    for r in (r for r in rows if r["method"] == "ar-control"):
        a = ar[r["batch_size"]]
        assert r["speedup_vs_ar"] == pytest.approx(r["tokens_per_second"] / a["tokens_per_second"])
        assert r["round_seconds"] != a["round_seconds"]  # timed on its own, not a copy of AR's row


def test_bench_rejects_a_bad_variant(saved, profiled, capsys, tmp_path):
    root, _, _ = saved
    assert main(["bench", "--target", str(root / "target"), "--draft", str(root / "draft"), "--num-prompts", "1",
                 "--batch-sizes", "1", "--max-new-tokens", "2", "--methods", "smart", "--smart-variants", "alpha",
                 "--profile", str(profiled / "p.json"), "--prompt-sets", "spec_bench", "--device", "cpu",
                 "--out", str(tmp_path)]) == 2
    assert "--smart-variants: 'alpha' is not key=value" in capsys.readouterr().err
