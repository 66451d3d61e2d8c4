"""Nothing lost, nothing unbounded, one clear line for every bad input; pairs with padded vocabularies.

Datastores survive interrupted and concurrent writes and refuse damaged contents; tree sizes are bounded
by the models' positions and by free memory; every bad command line is one line on stderr with exit
status 2 naming the flag (Ctrl-C: 130), checked before any work; API misuse is a precise ValueError or
TypeError; drafts and scorers with more or fewer embedding rows than the target keep the output
identical; cached profiles and calibrations are keyed by content.
"""

from __future__ import annotations

import copy
import json
import shutil
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from filelock import FileLock

import specdec
from conftest import VOCAB, make_model, perturbed, ragged_prompts
from specdec import calibration as calibration_module
from specdec import profiling
from specdec.profiling import FORMAT_VERSION
from specdec.cli import main
from specdec.cost import CostModel
from specdec.datastore import Datastore, stdlib_datastore
from specdec.models import load_tokenizer
from specdec.sampling import Sampling
from specdec.state import DecodeState
from test_cli import saved  # noqa: F401  (the fixture: a tiny Llama pair and a word-level tokenizer on disk)
from test_generate import reference
from test_smart import MODERATE, fixed_cost

pytestmark = pytest.mark.hf


def run_cli(capsys, argv: list[str]) -> tuple[int, list[str]]:
    """`specdec ARGV` through the entry point: its exit status and stderr lines (progress bars dropped)."""
    code = main([str(a) for a in argv])
    err = capsys.readouterr().err
    lines = [line for line in err.split("\n") if line.strip() and "\r" not in line]  # \r: progress bars
    assert "Traceback" not in err
    return code, lines


def assert_one_line_error(capsys, argv: list[str], prefix: str) -> str:
    code, lines = run_cli(capsys, argv)
    assert code == 2 and len(lines) == 1, lines
    assert lines[0].startswith(f"specdec: error: {prefix}"), lines[0]
    return lines[0]


# ---------------------------------------------------------------------------------------------- datastores
@pytest.fixture()
def corpus(tmp_path):
    """Three text documents and two more to append, in the saved tokenizer's words w3..w95."""
    first, more = tmp_path / "first", tmp_path / "more"
    first.mkdir()
    more.mkdir()
    for i in range(3):
        (first / f"d{i}.txt").write_text(" ".join(f"w{3 + (i * 7 + j) % 90}" for j in range(40)))
    for i in range(2):
        (more / f"e{i}.txt").write_text(" ".join(f"w{3 + (i * 11 + j) % 90}" for j in range(30)))
    return first, more


def documents(path: Path) -> int:
    return Datastore.open(path).header["documents"]


def arrays_of(store: Datastore) -> Path:
    """The folder holding a store's arrays (its current generation)."""
    return store.path / store.header.get("generation", "")


def test_interrupted_append_keeps_the_store_and_a_rerun_appends(saved, corpus, tmp_path, capsys, monkeypatch):  # noqa: F811
    root = saved[0]
    first, more = corpus
    store = tmp_path / "store"
    build = ["datastore", "build", "--tokenizer", root / "target", "--out", store, "--quiet"]
    assert run_cli(capsys, build + [first])[0] == 0
    assert documents(store) == 3
    real_save = np.save

    def save_then_interrupt(file, array, **kw):  # half of the first array reaches the disk, then Ctrl-C
        real_save(file, array[: array.size // 2], **kw)
        raise KeyboardInterrupt

    monkeypatch.setattr(np, "save", save_then_interrupt)
    code, lines = run_cli(capsys, build + ["--append", more])
    assert code == 130 and lines == ["specdec: interrupted"]
    monkeypatch.setattr(np, "save", real_save)
    assert documents(store) == 3  # the old store, whole
    assert run_cli(capsys, build + ["--append", more])[0] == 0  # the same command again
    assert documents(store) == 5
    assert sorted(p.name for p in store.iterdir() if not p.name.startswith(".lock")) == sorted(
        [arrays_of(Datastore.open(store)).name, "datastore.json"])  # no staging folder left


@pytest.mark.parametrize("damage", ["token beyond vocabulary", "suffix out of range", "shuffled suffixes"])
def test_damaged_contents_are_refused_naming_the_file(tmp_path, damage):
    store = Datastore.build(None, [np.arange(40) % 9, np.arange(30) % 5], tmp_path, vocab_size=9, progress=False)
    arrays = arrays_of(store)
    name = "tokens.npy" if damage.startswith("token") else "suffix_array.npy"
    array = np.load(arrays / name)
    if damage == "token beyond vocabulary":
        array[3] = 9  # shape and dtype kept
    elif damage == "suffix out of range":
        array[5] = array.size + 7
    else:
        array[1:] = np.random.default_rng(0).permutation(array[1:])
    np.save(arrays / name, array)
    with pytest.raises(ValueError, match=f"{name}: its contents .* differ from the checksum"):
        Datastore.open(tmp_path)
    lazy = Datastore.open(tmp_path, verify=False)  # a very large store: verified on its first query instead
    with pytest.raises(ValueError, match=name):
        lazy.longest_match(np.array([[1, 2]]))


def test_the_demo_store_is_rebuilt_when_damaged(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECDEC_CACHE", str(tmp_path))
    tokenizer = load_tokenizer("demo-target")
    store = stdlib_datastore(tokenizer, max_files=2, progress=False)
    tokens = np.load(arrays_of(store) / "tokens.npy")
    damaged = tokens.copy()
    damaged[0] = len(tokenizer) + 5
    np.save(arrays_of(store) / "tokens.npy", damaged)
    again = stdlib_datastore(tokenizer, max_files=2, progress=False)
    assert np.array_equal(np.asarray(again.tokens), tokens)


def test_concurrent_builds_wait_for_the_lock_and_mixed_arrays_are_refused(tmp_path):
    old = Datastore.build(None, [np.arange(20) % 7], tmp_path / "s", vocab_size=7, progress=False)
    result = {}
    with FileLock(str(tmp_path / "s" / ".lock")):  # another build holds the folder
        worker = threading.Thread(target=lambda: result.setdefault("store", Datastore.build(
            None, [np.arange(20) % 5, np.arange(9) % 3], tmp_path / "s", vocab_size=7, progress=False)))
        worker.start()
        time.sleep(0.5)
        assert worker.is_alive() and documents(tmp_path / "s") == 1  # waiting; the old store is whole
    worker.join(timeout=30)
    assert documents(tmp_path / "s") == 2 and result["store"].documents == 2
    # Two stores with arrays of equal sizes: one's suffix array in the other's folder no longer opens.
    other = Datastore.build(None, [np.arange(20) % 6, np.arange(9) % 2], tmp_path / "t", vocab_size=7, progress=False)
    shutil.copy(arrays_of(other) / "suffix_array.npy", arrays_of(Datastore.open(tmp_path / "s")) / "suffix_array.npy")
    with pytest.raises(ValueError, match="suffix_array.npy: its contents"):
        Datastore.open(tmp_path / "s")
    assert old.longest_match(np.array([[1, 2]])).length.tolist() == [2]  # an opened store keeps its arrays


def test_stores_of_the_older_format(saved, corpus, tmp_path, capsys):  # noqa: F811
    tokens = np.array([4, 5, 6, -1], dtype=np.int32)
    np.save(tmp_path / "tokens.npy", tokens)
    np.save(tmp_path / "suffix_array.npy", np.array([3, 0, 1, 2], dtype=np.int32))
    header = {"format": "specdec-datastore", "version": 1, "tokenizer": "tok", "vocab_hash": None, "vocab_size": 9,
              "documents": 1, "sources": ["corpus/"], "num_tokens": 4}
    (tmp_path / "datastore.json").write_text(json.dumps(header))
    with pytest.raises(ValueError, match="older specdec .* rebuild it: specdec datastore build --tokenizer tok"):
        Datastore.open(tmp_path)
    (tmp_path / "datastore.json").unlink()  # a format-1 write interrupted after removing its header
    argv = ["datastore", "build", "--append", "--tokenizer", saved[0] / "target", "--out", tmp_path, corpus[1]]
    assert_one_line_error(capsys, argv, "--append: ")
    assert not (tmp_path / "datastore.json").exists()


# ---------------------------------------------------------------------------------------------- bounds
@pytest.fixture(scope="module")
def pair():
    target = make_model("llama")  # 256 positions
    return target, perturbed(target)


@pytest.mark.parametrize("make, match", [
    (lambda d: specdec.DraftSupplier(d, mode="chain", depth=300),
     r"depth: 300 exceeds the depth the models' 256 positions allow \(255\)"),
    (lambda d: specdec.DraftSupplier(d, mode="tree", depth=4, topk=3, total_tokens=100_000),
     r"total_tokens: 100000 exceeds the models' positions \(256\)"),
    (lambda d: specdec.SmartSupplier(d, fixed_cost(**MODERATE), max_depth=400), "max_depth: 400 exceeds"),
    (lambda d: specdec.SmartSupplier(d, fixed_cost(**MODERATE), budget=1000), "budget: 1000 exceeds"),
    (lambda d: specdec.PromptLookupSupplier(num_pred=300), "num_pred: 300 exceeds"),
    (lambda d: specdec.PromptLookupSupplier(num_pred=100, max_matches=4), "max_matches: 4 continuations of num_pred"),
])
def test_trees_are_bounded_by_positions(pair, make, match):
    target, draft = pair
    with pytest.raises(ValueError, match=match):
        specdec.SpeculativeGenerator(target, make(draft))


def test_retrieval_trees_are_bounded_by_positions(pair, tmp_path):
    store = Datastore.build(None, [np.arange(30) % 9], tmp_path, vocab_size=9, progress=False)
    for kwargs, match in ((dict(budget=300), r"budget: 300 exceeds the target's positions \(256\)"),
                          (dict(continuation=256), "continuation: 256 exceeds")):
        with pytest.raises(ValueError, match=match):
            specdec.SpeculativeGenerator(pair[0], specdec.RetrievalSupplier(store, **kwargs))


def test_memory_estimate_names_the_argument_before_allocating(pair, monkeypatch):
    target, draft = pair
    gen = specdec.SpeculativeGenerator(target, specdec.DraftSupplier(draft, depth=2, topk=90, total_tokens=32))
    ids, mask = ragged_prompts([7])
    monkeypatch.setattr(specdec.generate, "free_memory", lambda device: 50_000, raising=False)
    monkeypatch.setattr(specdec.suppliers.draft.DraftRunner, "start", lambda *a, **k: pytest.fail("allocated"))
    with pytest.raises(ValueError, match=r"topk: a batch of 1 needs about .* GiB .* free on cpu; lower topk"):
        gen.generate(ids, attention_mask=mask, max_new_tokens=5)


# ---------------------------------------------------------------------------------------------- the CLI
@pytest.fixture()
def files(saved, tmp_path):  # noqa: F811
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


def test_a_draft_with_another_tokenizer_is_refused(saved, tmp_path, capsys):  # noqa: F811
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


def test_ctrl_c_is_one_line_and_leaves_no_partial_file(saved, tmp_path, capsys, monkeypatch):  # noqa: F811
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


# ---------------------------------------------------------------------------------------------- API misuse
@pytest.fixture(scope="module")
def ar_generator(pair):
    return specdec.SpeculativeGenerator(pair[0], specdec.ARSupplier())


def test_masked_positions_may_hold_minus_100(pair, ar_generator):
    ids, mask = ragged_prompts([4, 7])
    ref = reference(pair[0], ids, mask, 6, eos=[])
    ids = ids.masked_fill(mask == 0, -100)
    out = ar_generator.generate(ids, attention_mask=mask, max_new_tokens=np.int64(6), eos_token_id=[], pad_token_id=0)
    assert torch.equal(out.sequences[:, 7:], ref[:, 7:]) and torch.equal(out.sequences[:, :7], ids)


@pytest.mark.parametrize("kwargs, error, match", [
    (dict(eos_token_id="x"), ValueError, "eos_token_id: expected None, a token id"),
    (dict(eos_token_id=[2, -1]), ValueError, "eos_token_id: expected None, a token id"),
    (dict(pad_token_id=99999), ValueError, r"pad_token_id: expected a token id in \[0, 96\), got 99999"),
    (dict(pad_token_id=-5), ValueError, r"pad_token_id: expected a token id in \[0, 96\), got -5"),
    (dict(attention_mask=[[1, 1, 1, 1]]), TypeError, "attention_mask: expected a torch.Tensor or None, got list"),
])
def test_generate_arguments(ar_generator, kwargs, error, match):
    args = dict(input_ids=torch.tensor([[5, 6, 7, 8]]), max_new_tokens=3, **kwargs)
    with pytest.raises(error, match=match):
        ar_generator.generate(**args)


@pytest.mark.parametrize("ids, start, error, match", [
    (torch.ones(2, 4, dtype=torch.int64), torch.zeros(1, dtype=torch.int64), ValueError, r"start: expected a \[2\]"),
    (torch.ones(2, 4, dtype=torch.int64), torch.tensor([-1, 0]), ValueError, r"start: pad counts must lie in \[0, 4\]"),
    (torch.ones(2, 4, dtype=torch.int64), torch.tensor([5, 0]), ValueError, r"start: pad counts must lie in \[0, 4\]"),
    (torch.ones(2, 4, dtype=torch.int64), torch.tensor([0.0, 1.0]), ValueError, r"start: expected a \[2\] int64"),
    (torch.ones(4, dtype=torch.int64), torch.zeros(2, dtype=torch.int64), ValueError,
     r"input_ids: expected a \[2, P\]"),
    (torch.full((2, 4), 500), torch.tensor([0, 2]), ValueError, r"input_ids: token ids outside .* \[0, 96\)"),
])
def test_prefill_arguments(pair, ids, start, error, match):
    verifier = specdec.TreeVerifier(pair[0])
    cache = verifier.new_cache(2, 16)
    with pytest.raises(error, match=match):
        verifier.prefill(cache, ids, start)
    assert not cache.host_length.any()
    verifier.prefill(cache, torch.full((2, 4), -100).masked_fill(torch.arange(4) >= 2, 5), torch.tensor([2, 2]))
    assert cache.host_length.tolist() == [4, 4]


@pytest.mark.parametrize("value", ["x", None, -3])
def test_cost_model_batch_size_is_validated(tmp_path, value):
    model = fixed_cost(**MODERATE)
    model.save(tmp_path / "c.json")
    doc = json.loads((tmp_path / "c.json").read_text())
    (tmp_path / "c.json").write_text(json.dumps({**doc, "batch_size": value}))
    with pytest.raises(ValueError, match="batch_size must be a positive int"):
        CostModel.load(tmp_path / "c.json")


# ---------------------------------------------------------------------------------------------- padded vocabularies
def resized(model, rows: int, seed: int = 3):
    """A copy with `rows` embedding and LM-head rows: the first ones shared, new ones (when larger) random with a
    large head, so that a draft not restricted to the shared ids would propose them."""
    out = copy.deepcopy(model)
    out.resize_token_embeddings(rows, mean_resizing=False)
    if rows > model.config.vocab_size:
        gen = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            out.lm_head.weight[model.config.vocab_size:] = 40 * torch.randn(
                rows - model.config.vocab_size, out.lm_head.weight.shape[1], generator=gen)
    return out


@pytest.fixture(scope="module", params=[80, 120], ids=["smaller", "larger"])
def padded(request, pair):
    target, draft = pair
    return target, resized(draft, request.param)


@pytest.mark.parametrize("make", [
    lambda d: specdec.DraftSupplier(d, mode="chain", depth=4),
    lambda d: specdec.DraftSupplier(d, mode="tree", depth=3, topk=3, total_tokens=10),
    lambda d: specdec.SmartSupplier(d, fixed_cost(**MODERATE, batch_size=3), topk=3, frontier=3, max_depth=4),
], ids=["chain", "tree", "smart"])
def test_drafts_with_padded_vocabularies_keep_the_output(padded, make):
    target, draft = padded
    ids, mask = ragged_prompts([5, 11, 8], seed=2)  # prompt ids up to 95: some beyond a smaller draft's rows
    supplier = make(draft)
    out = specdec.SpeculativeGenerator(target, supplier).generate(ids, attention_mask=mask, max_new_tokens=16,
                                                                  eos_token_id=[], pad_token_id=0)
    assert torch.equal(out.sequences, reference(target, ids, mask, 16, eos=[]))
    assert out.stats.mean_accepted_length > 1.0  # the shared rows drafted usefully
    state = DecodeState.begin(ids, (mask == 0).sum(1), max_new_tokens=4, capacity=96, eos_token_ids=[], pad_token_id=0)
    supplier.start(state)
    tree = supplier.propose(state)
    assert bool((tree.tokens[:, 1:][tree.valid[:, 1:]] < min(80, VOCAB)).all() if draft.config.vocab_size < VOCAB
                else (tree.tokens < VOCAB).all())  # never an id only one model has


def test_sampled_draft_distribution_is_zero_past_the_shared_ids(pair):
    target, draft = pair[0], resized(pair[1], 80)
    supplier = specdec.DraftSupplier(draft, mode="tree", depth=3, topk=2, total_tokens=7)
    specdec.SpeculativeGenerator(target, supplier)
    ids, mask = ragged_prompts([6, 9])
    gen = torch.Generator().manual_seed(0)
    state = DecodeState.begin(ids, (mask == 0).sum(1), max_new_tokens=4, capacity=64, eos_token_ids=[], pad_token_id=0,
                              sampling=Sampling(1.0), generator=gen)
    supplier.start(state)
    tree = supplier.propose(state)
    assert tree.draft_probs.shape[-1] == VOCAB and not tree.draft_probs[..., 80:].any()
    assert torch.allclose(tree.draft_probs[:, 0].sum(-1), torch.ones(2))
    out = specdec.SpeculativeGenerator(target, supplier).generate(ids, attention_mask=mask, max_new_tokens=8,
                                                                  temperature=1.0, generator=gen, pad_token_id=0)
    assert out.sequences.shape[1] > ids.shape[1]


@pytest.mark.parametrize("rows", [80, 120])
def test_scorers_with_padded_vocabularies(pair, rows):
    target = pair[0]
    scorer = resized(pair[1], rows)
    bs = specdec.BranchScorer(scorer)
    bs.attach(target)
    ids, mask = ragged_prompts([6])
    bs.start(DecodeState.begin(ids, (mask == 0).sum(1), max_new_tokens=4, capacity=64, eos_token_ids=[],
                               pad_token_id=0), region=8)
    tree = specdec.TreeBatch.from_parents([[int(ids[0, -1]), 90, 10, 11]], [[-1, 0, 0, 2]])  # 90: beyond 80 rows
    logp = bs.node_logprobs(tree)[0]
    known = torch.where(ids < rows, ids, 0)  # ids the scorer cannot embed are fed as 0
    expect = torch.log_softmax(scorer(known).logits[0, -1, :min(rows, VOCAB)].float(), -1)
    assert torch.allclose(logp[2], expect[10], atol=1e-4)  # softmax over the shared rows only
    if rows < 90:
        assert logp[1] == float("-inf") and torch.isfinite(logp[3])  # id 90 is beyond the scorer's rows
    else:
        assert torch.allclose(logp[1], expect[90], atol=1e-4)
    filt = specdec.FixedThresholdFilter(scorer, 0.02)
    ids, mask = ragged_prompts([9, 14], seed=4)
    gen = specdec.SpeculativeGenerator(target, specdec.PromptLookupSupplier(), filt)
    out = gen.generate(ids, attention_mask=mask, max_new_tokens=12, eos_token_id=[], pad_token_id=0)
    assert torch.equal(out.sequences, reference(target, ids, mask, 12, eos=[]))


# ---------------------------------------------------------------------------------------------- caches
def count_calls(monkeypatch, module, name: str) -> list:
    calls, real = [], getattr(module, name)

    def counted(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(module, name, counted)
    return calls


def test_profile_cache_is_keyed_by_content(tmp_path, monkeypatch, saved):  # noqa: F811
    monkeypatch.setenv("SPECDEC_CACHE", str(tmp_path))
    calls = count_calls(monkeypatch, profiling, "profile")
    settings = dict(batch_sizes=(1,), context_len=8, sizes=(1, 2, 4), repeats=1, progress=False)
    one, two = make_model("llama", seed=0), make_model("llama", seed=1)  # two config-built models
    profiling.cached_profile(one, **settings)
    profiling.cached_profile(one, **settings)
    profiling.cached_profile(two, **settings)
    assert len(calls) == 2
    from specdec import records

    monkeypatch.setattr(records, "source_hash", lambda: "another version of the code")
    profiling.cached_profile(one, **settings)
    assert len(calls) == 3
    path = next((tmp_path / "profiles").glob("*.json"))  # a damaged cache file is measured again
    doc = json.loads(path.read_text())
    for p in (tmp_path / "profiles").glob("*.json"):
        p.write_text(json.dumps({**doc, "sizes": 5}))
    profiling.cached_profile(one, **settings)
    assert len(calls) == 4
    folder = tmp_path / "model"  # retrained in place: same path, new weights
    shutil.copytree(saved[0] / "target", folder)
    from specdec.models import load_model
    profiling.cached_profile(load_model(str(folder), device="cpu"), **settings)
    perturbed(load_model(str(folder), device="cpu")).save_pretrained(folder)
    profiling.cached_profile(load_model(str(folder), device="cpu"), **settings)
    assert len(calls) == 6


def test_calibration_cache_is_keyed_by_content(tmp_path, monkeypatch, pair):
    monkeypatch.setenv("SPECDEC_CACHE", str(tmp_path))
    calls = count_calls(monkeypatch, calibration_module, "calibrate")
    target = pair[0]
    prompts = [ragged_prompts([6])[0][0].tolist()]
    for scorer in (make_model("llama", seed=5), make_model("llama", seed=6)):  # same config, other weights
        calibration_module.cached_calibration(target, scorer, prompts, max_new_tokens=6, window=3)
    assert len(calls) == 2
