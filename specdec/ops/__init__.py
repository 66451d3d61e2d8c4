"""specdec's ops: launchers (validation, allocation, backend dispatch) and their pure-torch references.

Each op has exactly one reference, ``<op>_ref``: the test oracle and the benchmark baseline, and the CPU
path of the ops that have no faster one there (tree attention runs SDPA on the CPU, tree metadata numpy:
`tree_metadata_host`).
"""

from ._backend import BACKENDS
from .logprob import (path_mean, path_mean_ref, token_logprob, token_logprob_from_logits,
                      token_logprob_from_logits_ref, token_logprob_ref)
from .smart_expand import COST_FIELDS, Expansion, smart_cost, smart_expand, smart_expand_ref
from .tree_attention import (SdpaPlan, sdpa_plan, tree_attention, tree_attention_mask, tree_attention_ref,
                             tree_attention_sdpa)
from .tree_metadata import tree_metadata, tree_metadata_host, tree_metadata_ref

__all__ = [
    "BACKENDS",
    "tree_attention", "tree_attention_ref", "tree_attention_sdpa", "tree_attention_mask", "SdpaPlan", "sdpa_plan",
    "tree_metadata", "tree_metadata_ref", "tree_metadata_host",
    "smart_expand", "smart_expand_ref", "smart_cost", "Expansion", "COST_FIELDS",
    "token_logprob", "token_logprob_ref", "token_logprob_from_logits", "token_logprob_from_logits_ref",
    "path_mean", "path_mean_ref",
]
