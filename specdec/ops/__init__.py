"""specdec's ops: launchers (validation, allocation, backend dispatch) and their pure-torch references.

Each op has exactly one reference, ``<op>_ref``: the CPU path, the test oracle and the benchmark baseline.
"""

from ._backend import BACKENDS
from .tree_attention import tree_attention, tree_attention_ref

__all__ = ["BACKENDS", "tree_attention", "tree_attention_ref"]
from .tree_metadata import tree_metadata  # noqa: E402
__all__ += ["tree_metadata"]
from .logprob import (path_mean, path_mean_ref, token_logprob, token_logprob_from_logits,  # noqa: E402
                      token_logprob_from_logits_ref, token_logprob_ref)
from .smart_expand import COST_FIELDS, Expansion, smart_cost, smart_expand, smart_expand_ref  # noqa: E402
__all__ += ["Expansion", "COST_FIELDS", "smart_cost", "smart_expand", "smart_expand_ref", "token_logprob",
            "token_logprob_ref", "token_logprob_from_logits", "token_logprob_from_logits_ref", "path_mean",
            "path_mean_ref"]
