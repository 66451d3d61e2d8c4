"""The package's import graph, read from the source with `ast` (nothing is imported): no cycle, no import
that points up the layers, and nothing inside the package importing ``specdec``'s ``__init__``.

Layers, bottom to top: ops (``specdec.ops``, the Triton kernels ``specdec.kernels``),
core (the engine), methods (suppliers, SMART, EAGLE, retrieval, ValuSpec...), app (CLI, evaluation,
harness, model loading). A module may import its own layer or a lower one. Every import counts: at the top,
inside functions, and under ``TYPE_CHECKING`` (an annotation is a dependency too).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = "specdec"
LAYERS = ("ops", "core", "methods", "app")
CORE = {"tree", "cache", "attention", "verify", "state", "sampling", "generate", "stages", "parallel", "records",
        "checks"}
METHODS = {"suppliers", "planner", "step_pricing", "realised", "cost", "cost_by_batch", "estimates", "online_costs",
           "spread", "profiling", "eagle", "eagle_checkpoint", "eagle_profiling", "training", "vocab", "valuspec",
           "gate", "calibration", "datastore", "_corpus"}
# The app layer: the package specdec/app/ and `python -m specdec`'s entry point.
APP = {"app", "__main__"}
# Packaged data with a path helper (the demo pair's weights): imports nothing, so it sits at the bottom.
DATA = {"demo_pair"}


def layer_of(module: str) -> str | None:
    """The layer of a module ("specdec.tree" -> "core"); None for the package's own __init__ (the facade)."""
    parts = module.split(".")
    if parts[0] != PACKAGE or len(parts) == 1:
        return None
    top = parts[1]
    if top in ("ops", "kernels") or top in DATA:
        return "ops"
    for name, members in (("core", CORE), ("methods", METHODS), ("app", APP)):
        if top in members:
            return name
    raise AssertionError(f"{module}: in no layer; add it to tests/package/test_layers.py's map")


def source_modules() -> dict[str, Path]:
    """Module name -> file for every module of specdec/ and kernels/ (installed as specdec.kernels)."""
    out = {}
    for folder, prefix in ((ROOT / PACKAGE, PACKAGE), (ROOT / "kernels", f"{PACKAGE}.kernels")):
        for file in sorted(folder.rglob("*.py")):
            rel = file.relative_to(folder).with_suffix("").parts
            if rel[-1] == "__init__":
                rel = rel[:-1]
            out[".".join((prefix, *rel))] = file
    return out


def imports_of(module: str, file: Path, known: set[str]) -> set[str]:
    """The package modules `module` imports anywhere in its source (``from . import x`` names module x when
    x is a module, else the package it is read from)."""
    is_package = file.name == "__init__.py"
    here = module.split(".") if is_package else module.split(".")[:-1]
    found = set()
    for node in ast.walk(ast.parse(file.read_text(encoding="utf-8"), str(file))):
        if isinstance(node, ast.Import):
            bases = [alias.name for alias in node.names]
            names: list[str] = []
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                anchor = here[: len(here) - node.level + 1]
                bases = [".".join(anchor + ([node.module] if node.module else []))]
            else:
                bases = [node.module or ""]
            names = [alias.name for alias in node.names]
        else:
            continue
        for base in bases:
            if base != PACKAGE and not base.startswith(PACKAGE + "."):
                continue
            subs = [f"{base}.{n}" for n in names if f"{base}.{n}" in known]
            if not subs or len(subs) < len(names):
                found.add(base)  # some names are attributes of `base` itself
            found.update(subs)
    found.discard(module)
    return found


def import_graph() -> dict[str, set[str]]:
    modules = source_modules()
    known = set(modules)
    return {name: imports_of(name, file, known) for name, file in modules.items()}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle as a list of modules (first == last), or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    """Edges from a module to one in a higher layer, and any import of the package's __init__."""
    bad = []
    for module, targets in sorted(graph.items()):
        src = layer_of(module)
        for target in sorted(targets):
            if target == PACKAGE:
                bad.append(f"{module} imports {PACKAGE}'s __init__")
            elif src is not None and LAYERS.index(layer_of(target)) > LAYERS.index(src):
                bad.append(f"{module} ({src}) imports {target} ({layer_of(target)})")
    return bad


def test_the_package_has_no_import_cycle():
    assert find_cycle(import_graph()) is None


def test_imports_point_down_the_layers():
    assert upward_imports(import_graph()) == []


def test_every_module_has_a_layer():
    graph = import_graph()
    assert "specdec.ops.tree_metadata" in graph and "specdec.kernels.tree_metadata" in graph
    for module in graph:
        layer_of(module)


def test_the_checks_find_a_cycle_and_an_upward_import():
    graph = {"specdec.tree": {"specdec.ops.tree_metadata"}, "specdec.ops.tree_metadata": {"specdec.tree"}}
    assert find_cycle(graph) == ["specdec.ops.tree_metadata", "specdec.tree", "specdec.ops.tree_metadata"]
    assert upward_imports(graph) == ["specdec.ops.tree_metadata (ops) imports specdec.tree (core)"]
    assert upward_imports({"specdec.profiling": {"specdec"}}) == ["specdec.profiling imports specdec's __init__"]
    assert upward_imports({"specdec.app.cli": {"specdec.tree"}, "specdec.cost": {"specdec.app.harness"}}) == [
        "specdec.cost (methods) imports specdec.app.harness (app)"]
    assert find_cycle({"specdec.a": {"specdec.b"}, "specdec.b": set()}) is None
    with pytest.raises(AssertionError, match="in no layer"):
        layer_of("specdec.unheard_of")


def test_imports_are_read_relative_and_absolute(tmp_path):
    file = tmp_path / "mod.py"
    file.write_text("from . import ops, __version__\nimport specdec.tree\nimport numpy\n"
                    "def f():\n    from .cache import TreeCache\n    from specdec.suppliers import base\n")
    known = {"specdec.ops", "specdec.tree", "specdec.cache", "specdec.suppliers", "specdec.suppliers.base"}
    # __version__ is no module: the package's __init__ is what is imported
    assert imports_of("specdec.mod", file, known) == {
        "specdec", "specdec.ops", "specdec.tree", "specdec.cache", "specdec.suppliers.base"}
    file.write_text("from ..tree import TreeBatch\nfrom .base import Supplier\n")
    known |= {"specdec.suppliers.draft"}
    assert imports_of("specdec.suppliers.draft", file, known) == {"specdec.tree", "specdec.suppliers.base"}
