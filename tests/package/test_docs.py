"""The documentation: the worked supplier example runs and matches generate(), and every relative link
(and #anchor) in README.md, docs/ and bench/results/README.md points at something that exists."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", ROOT / "bench" / "results" / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
_FENCE = re.compile(r"^(```|~~~).*?^\1", re.S | re.M)
_CODE = re.compile(r"`[^`\n]*`")
_LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def _load_example():
    path = ROOT / "docs" / "examples" / "custom_supplier.py"
    spec = importlib.util.spec_from_file_location("specdec_docs_custom_supplier", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_custom_supplier_example_matches_generate():
    example = _load_example()
    ours, reference, accepted = example.run(max_new_tokens=24)
    assert torch.equal(ours, reference)
    assert accepted > 1.0  # the supplier's guesses are accepted sometimes: it is not a plain decoder


def test_custom_supplier_example_checks_depth():
    with pytest.raises(ValueError, match="depth"):
        _load_example().RepeatSupplier(depth=0)


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: markup dropped, lower case, punctuation removed, spaces to hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link keeps its text
    text = re.sub(r"[`*_]", "", text).strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    anchors = set()
    for line in _FENCE.sub("", path.read_text()).splitlines():
        m = re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)
        if m:
            slug = _slug(m.group(1))
            n = seen.get(slug, 0)
            anchors.add(slug if n == 0 else f"{slug}-{n}")
            seen[slug] = n + 1
    anchors |= set(re.findall(r'<a (?:id|name)="([^"]+)"', path.read_text()))
    return anchors


def _links(path: Path) -> list[str]:
    text = _CODE.sub("", _FENCE.sub("", path.read_text()))
    return _LINK.findall(text)


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(doc: Path):
    assert doc.is_file(), doc
    broken = []
    for link in _links(doc):
        if re.match(r"[a-z][a-z0-9+.-]*:", link):  # http:, https:, mailto: ... are not checked
            continue
        target, _, anchor = link.partition("#")
        dest = (doc.parent / target).resolve() if target else doc
        if not dest.exists():
            broken.append(f"{link} (no such file)")
        elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
            broken.append(f"{link} (no heading for #{anchor})")
    assert not broken, f"{doc.relative_to(ROOT)}: " + "; ".join(broken)


def test_docs_exist():
    names = {p.name for p in (ROOT / "docs").glob("*.md")}
    for name in ("architecture.md", "extending.md", "verifier.md", "smart.md", "retrieval.md", "valuspec.md",
                 "sampling.md", "eagle.md", "kernels.md", "tensor-parallel.md", "cli.md", "benchmarking.md"):
        assert name in names, name
    assert len((ROOT / "README.md").read_bytes()) <= 12 * 1024
