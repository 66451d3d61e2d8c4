"""Datastores survive interrupted and concurrent writes, refuse damaged contents naming the file, and tell
stores of an older format to be rebuilt."""

from __future__ import annotations

import json
import shutil
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from filelock import FileLock

from specdec.datastore import Datastore, stdlib_datastore
from specdec.app.models import load_tokenizer
from tests.helpers import assert_one_line_error, run_cli

pytestmark = pytest.mark.hf


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


def test_interrupted_append_keeps_the_store_and_a_rerun_appends(saved, corpus, tmp_path, capsys, monkeypatch):
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


def test_stores_of_the_older_format(saved, corpus, tmp_path, capsys):
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
