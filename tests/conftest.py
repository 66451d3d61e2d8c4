"""The suite's hook and fixtures: the `gpu` marker's skips, a cache folder of the run's own, no gradients, and
the fixtures several modules share. Builders and asserts live in tests/helpers.py."""

from __future__ import annotations

import os

import torch

# Without a GPU, Triton kernels run on the CPU under the interpreter, which must be switched on before
# triton is first imported (plain `import torch` does not import it).
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest
from tokenizers import Tokenizer, pre_tokenizers
from tokenizers.models import WordLevel
from transformers import PreTrainedTokenizerFast

from tests.helpers import ARCHS, VOCAB, make_model, perturbed


def pytest_collection_modifyitems(config, items):
    """Skip `gpu` tests without a CUDA device, and `gpu(extension=True)` ones without the compiled extension
    too (the markers' meaning: pyproject.toml); the one place the suite decides what needs a GPU."""
    gpu = [item for item in items if item.get_closest_marker("gpu")]
    if not gpu:
        return
    if not torch.cuda.is_available():
        for item in gpu:
            item.add_marker(pytest.mark.skip(reason="needs a CUDA device"))
        return
    from specdec.ops._backend import cuda_extension_built

    if not cuda_extension_built():
        reason = "needs the compiled extension specdec._C (SPECDEC_BUILD_CUDA=1 pip install --no-build-isolation -e .)"
        for item in gpu:
            if item.get_closest_marker("gpu").kwargs.get("extension"):
                item.add_marker(pytest.mark.skip(reason=reason))


@pytest.fixture(scope="session", autouse=True)
def _specdec_cache(tmp_path_factory):
    """$SPECDEC_CACHE points at a folder of this run: tests never read or write the user's cache, and what one
    test caches (the demo datastore, profiles) is reused within the run. A test that needs an empty cache sets
    its own with monkeypatch."""
    old = os.environ.get("SPECDEC_CACHE")
    os.environ["SPECDEC_CACHE"] = str(tmp_path_factory.mktemp("specdec-cache"))
    yield
    if old is None:
        del os.environ["SPECDEC_CACHE"]
    else:
        os.environ["SPECDEC_CACHE"] = old


@pytest.fixture(autouse=True)
def _no_grad():
    with torch.no_grad():
        yield


@pytest.fixture(scope="module", params=sorted(ARCHS))
def models(request):
    """(arch, target, a perturbed draft) for each tiny architecture."""
    target = make_model(request.param)
    return request.param, target, perturbed(target)


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """A tiny Llama target, a perturbed draft and a word-level tokenizer w0..w95, saved like hub checkpoints."""
    root = tmp_path_factory.mktemp("models")
    vocab = {"<pad>": 0, "<s>": 1, "</s>": 2, **{f"w{i}": i for i in range(3, VOCAB)}}
    tok = Tokenizer(WordLevel(vocab, unk_token="<pad>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", bos_token="<s>", eos_token="</s>")
    target = make_model("llama")
    for name, model in (("target", target), ("draft", perturbed(target))):
        model.save_pretrained(root / name)
        tokenizer.save_pretrained(root / name)
    return root, target, tokenizer


@pytest.fixture(scope="module")
def profiled(saved, tmp_path_factory):
    """`specdec profile` of the saved pair at batch sizes 1 and 2: the folder holding p.json and fit.png."""
    from specdec.app.cli import main

    root, _, _ = saved
    out = tmp_path_factory.mktemp("profile")
    assert main(["profile", "--target", str(root / "target"), "--draft", str(root / "draft"), "--batch-sizes", "1,2",
                 "--context-len", "16", "--sizes", "1,2,4,8", "--repeats", "1", "--device", "cpu",
                 "--out", str(out / "p.json"), "--plot", str(out / "fit.png")]) == 0
    return out
