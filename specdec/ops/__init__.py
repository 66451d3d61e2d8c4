"""specdec's ops: launchers (validation, allocation, backend dispatch) and their pure-torch references.

Each op has exactly one reference, ``<op>_ref``: the CPU path, the test oracle and the benchmark baseline.
"""

from ._backend import BACKENDS
from .tree_attention import tree_attention, tree_attention_ref

__all__ = ["BACKENDS", "tree_attention", "tree_attention_ref"]
