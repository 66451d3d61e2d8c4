"""Where a model's weights live: one device per process, optionally tensor-parallel across processes.

specdec supports a model on one device, and a model sharded by transformers' own tensor parallelism
(``from_pretrained(path, tp_plan="auto")`` under ``torchrun``): every rank then runs the whole decoding
loop, its attention layers see only their shard of the heads (its `TreeCache` holds only those), the LM
head gathers the full logits, so trees and acceptance are identical on every rank. `check_placement`
refuses, before anything is decoded, the layouts the tree-attention hook cannot serve: a model split
over several devices by ``device_map`` (layers on different GPUs, CPU or disk offload), a tensor-parallel
plan that shards attention other than by whole heads or leaves the logits sharded, a world size that
does not divide the heads. `attention_heads` is what a rank's attention receives, which sizes its cache.
"""

from __future__ import annotations

import torch
from transformers import PreTrainedModel

__all__ = ["attention_heads", "check_placement", "full_weight", "tp_size"]

# Tensor-parallel styles that keep whole heads on a rank: q/k/v projections column-sharded (each rank
# computes heads [r*H/N, (r+1)*H/N)), the output projection row-sharded (its all-reduce restores the
# full hidden state), norms inside attention replicated (Qwen3's q_norm/k_norm act per head).
_ATTENTION_STYLES = {"q_proj": ("colwise",), "k_proj": ("colwise",), "v_proj": ("colwise",), "o_proj": ("rowwise",)}
# The verifier's argmax needs the full vocabulary on every rank.
_LM_HEAD_STYLES = ("colwise_gather_output",)


def tp_size(model: PreTrainedModel) -> int:
    """Tensor-parallel degree of `model` (1 when it was not sharded)."""
    return int(getattr(model, "tp_size", None) or 1)


def _degree(model: PreTrainedModel, kind: str) -> int:
    """A parallelism degree ("fsdp_size", "pp_size") from the model (transformers 5.24) or the
    `DistributedConfig` it was loaded with (5.17 keeps it only there)."""
    config = getattr(model.config, "distributed_config", None)
    return int(getattr(model, kind, None) or getattr(config, kind, None) or 1)


def _tp_plan(model: PreTrainedModel) -> dict[str, str]:
    plan = getattr(model, "tp_plan", None)
    return dict(plan) if isinstance(plan, dict) else {}


def check_placement(model: PreTrainedModel, what: str = "model") -> None:
    """ValueError naming `what` if specdec cannot decode with `model` as its weights are laid out."""
    # The parameters' own devices, not hf_device_map (whose entries may read 0, "cuda" or "disk"): an
    # offloaded weight waits on "meta", so offloading shows up as a second device too.
    devices = {str(p.device) for p in model.parameters()}
    if len(devices) > 1:
        raise ValueError(f"{what}: its weights are split over {sorted(devices)} (device_map; 'meta': offloaded); "
                         "specdec keeps each model on one device per process: load it on one device, or shard "
                         "it with tensor parallelism (from_pretrained(..., distributed_config=DistributedConfig("
                         "tp_plan='auto')) under torchrun)")
    for kind, label in (("fsdp_size", "FSDP-sharded"), ("pp_size", "pipeline-parallel")):
        if _degree(model, kind) > 1:
            raise ValueError(f"{what}: {label} ({_degree(model, kind)} shards); specdec serves tensor parallelism "
                             "only (DistributedConfig(tp_plan='auto'))")
    size = tp_size(model)
    if size == 1:
        return
    config = model.config.get_text_config()
    q_heads = config.num_attention_heads
    kv_heads = getattr(config, "num_key_value_heads", None) or q_heads
    for heads, kind in ((q_heads, "query"), (kv_heads, "key/value")):
        if heads % size:
            raise ValueError(f"{what}: a tensor-parallel world of {size} processes does not divide its {heads} "
                             f"{kind} heads; use a world size that divides {kv_heads} (every rank must hold "
                             "whole heads)")
    for pattern, style in _tp_plan(model).items():
        leaf = pattern.rsplit(".", 1)[-1]
        if "sequence" in style:
            raise ValueError(f"{what}: its tensor-parallel plan shards the sequence ({pattern!r}: {style!r}); "
                             "tree forwards need every node on every rank")
        if leaf == "lm_head" and style not in _LM_HEAD_STYLES:
            raise ValueError(f"{what}: its tensor-parallel plan leaves the logits sharded ({pattern!r}: {style!r}); "
                             f"acceptance needs the full vocabulary on every rank ({_LM_HEAD_STYLES[0]!r})")
        in_attention = ".self_attn." in f".{pattern}." or leaf in _ATTENTION_STYLES
        if in_attention and style not in _ATTENTION_STYLES.get(leaf, ()) and not style.startswith("replicated"):
            raise ValueError(f"{what}: its tensor-parallel plan shards attention in a way tree attention does not "
                             f"serve ({pattern!r}: {style!r}); supported: q/k/v_proj 'colwise', o_proj 'rowwise', "
                             "replicated norms")


def attention_heads(model: PreTrainedModel) -> tuple[int, int, int]:
    """(query heads, key/value heads, head dim) that each of this rank's attention layers receives."""
    config = model.config.get_text_config()
    q_heads = config.num_attention_heads
    kv_heads = getattr(config, "num_key_value_heads", None) or q_heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // q_heads
    size = tp_size(model)
    if size > 1:
        sharded = {pattern.rsplit(".", 1)[-1] for pattern, style in _tp_plan(model).items() if style == "colwise"}
        q_heads //= size if "q_proj" in sharded else 1
        kv_heads //= size if "k_proj" in sharded else 1
    return q_heads, kv_heads, head_dim


def full_weight(weight: torch.Tensor) -> torch.Tensor:
    """The whole tensor behind a possibly tensor-parallel parameter (a collective: every rank calls it)."""
    from torch.distributed.tensor import DTensor

    return weight.full_tensor() if isinstance(weight, DTensor) else weight
