"""The Hugging Face attention hook and the tree forward every model (target, draft, scorer) goes through.

`install(model)` switches the model to a registered attention function ``specdec_<original>`` (for
example ``specdec_sdpa``) through transformers' public `AttentionInterface` and `set_attn_implementation`;
no modeling file is forked and no attribute is set on the model by hand. The function looks for one
keyword argument, ``specdec_tree`` (a `TreeAttentionMetadata`), that only `tree_forward` passes. Without
it, it calls the original implementation with the original mask function, so every other call of the
model (``model(...)``, ``model.generate(...)``) computes exactly what it did before (tested).
"""

from __future__ import annotations

import functools
import inspect
import sys
import weakref
from contextvars import ContextVar
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import Tensor
from transformers import AttentionInterface, Cache, PreTrainedModel
from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, AttentionMaskInterface
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

from . import ops
from .cache import TreeCache
from .ops._backend import resolve_backend
from .parallel import check_placement
from .tree import prefill_mask

__all__ = ["TreeAttentionMetadata", "FeatureCapture", "install", "install_capture", "tree_forward", "model_forward",
           "prefill", "PREFIX"]

PREFIX = "specdec_"


@dataclass(frozen=True)
class TreeAttentionMetadata:
    """What a tree forward's attention needs beyond q/k/v (see `ops.tree_attention`).

    start, length: [B] int64 from the cache; tree_mask: [B, T, W] int32 ancestor bitmask over the tree
    region; backend: the `ops.tree_attention` backend; plan: the sdpa backend's live slots and mask,
    built once per forward (`build`) so that no layer rebuilds them.
    """

    start: Tensor
    length: Tensor
    tree_mask: Tensor
    backend: str = "auto"
    plan: ops.SdpaPlan | None = None

    @classmethod
    def build(cls, start: Tensor, length: Tensor, tree_mask: Tensor, backend: str, *, host_start: np.ndarray,
              host_length: np.ndarray, region: int, causal_rows: int = 0) -> "TreeAttentionMetadata":
        """Metadata of one forward whose tree region (after it) holds `region` slots per row.

        host_start, host_length: the host copies of start and length (no device sync). causal_rows: the
        forward's first nodes form one chain in every row (a prompt block), which may need no mask.
        """
        plan = None
        if resolve_backend(backend, tree_mask.device, fast_torch="sdpa") == "sdpa":
            kv_len = int(host_length.max()) + region
            plan = ops.sdpa_plan(start, length, tree_mask, kv_len, host_start=host_start, host_length=host_length,
                                 causal_rows=causal_rows)
        return cls(start, length, tree_mask, backend, plan)


def _original(module: torch.nn.Module) -> str:
    return module.config._attn_implementation[len(PREFIX):]


def _specdec_attention(
    module: torch.nn.Module,
    query: Tensor,
    key: Tensor,
    value: Tensor,
    attention_mask: Tensor | None,
    scaling: float | None = None,
    dropout: float = 0.0,
    specdec_tree: TreeAttentionMetadata | None = None,
    **kwargs,
) -> tuple[Tensor, None]:
    if specdec_tree is None:
        name = _original(module)
        if name == "eager":  # eager is not in the registry: each modeling file carries its own
            original = sys.modules[type(module).__module__].eager_attention_forward
        else:
            original = ALL_ATTENTION_FUNCTIONS[name]
        return original(module, query, key, value, attention_mask, scaling=scaling, dropout=dropout, **kwargs)
    out = ops.tree_attention(query, key, value, specdec_tree.start, specdec_tree.length, specdec_tree.tree_mask,
                             scale=scaling, backend=specdec_tree.backend, plan=specdec_tree.plan)
    return out.transpose(1, 2), None  # [B, T, Hq, D], as attention functions return


def install(model: PreTrainedModel, what: str = "model") -> None:
    """Route `model`'s attention through specdec's hook (idempotent). Inert outside tree forwards.
    First refuses weight layouts the hook cannot serve (`parallel.check_placement`), naming `what`."""
    check_placement(model, what)
    current = model.config._attn_implementation
    if current.startswith(PREFIX):
        return
    if current != "eager" and current not in ALL_ATTENTION_FUNCTIONS:
        raise ValueError(f"model: attention implementation {current!r} is not one specdec can wrap "
                         "(sdpa, eager and the registered AttentionInterface functions are)")
    name = PREFIX + current
    AttentionInterface.register(name, _specdec_attention)
    AttentionMaskInterface.register(name, ALL_MASK_ATTENTION_FUNCTIONS[current])
    model.set_attn_implementation(name)
    if model.config._attn_implementation != name:
        raise ValueError(f"model: {type(model).__name__} does not accept a custom attention function "
                         "(it does not use transformers' AttentionInterface)")


@dataclass
class FeatureCapture:
    """Hidden states of a forward at some indices of transformers' ``hidden_states`` tuple.

    The convention is the tuple's (checked equal on transformers 5.17 and 5.24): index 0 is the embedding
    output, index i < L the input of decoder layer i (the pre-final-norm residual stream), index L (the
    number of layers) the last layer's output after the final norm. Only the requested indices are
    kept, so a forward holds no more than it must. `install_capture` puts the hooks on a model; a forward
    fills `states` only while `model_forward` runs with this capture.
    Example: a 6-layer target and layers (2, 3, 5): states {2: [B, N, d], 3: ..., 5: ...} after the forward.
    """

    layers: tuple[int, ...]
    states: dict[int, Tensor] = field(default_factory=dict)

    def features(self) -> Tensor:
        """[B, N, len(layers) * d]: the captured states concatenated in the order of `layers`."""
        missing = [i for i in self.layers if i not in self.states]
        if missing:
            raise RuntimeError(f"hidden states {missing} were not captured (install_capture was not run on this model)")
        return torch.cat([self.states[i] for i in self.layers], -1)


_ACTIVE_CAPTURE: ContextVar[FeatureCapture | None] = ContextVar("specdec_capture", default=None)
_CAPTURE_HOOKS: "weakref.WeakKeyDictionary[torch.nn.Module, set[int]]" = weakref.WeakKeyDictionary()


def _decoder_parts(model: PreTrainedModel) -> tuple[torch.nn.ModuleList, torch.nn.Module]:
    decoder = model.get_decoder()
    layers, norm = getattr(decoder, "layers", None), getattr(decoder, "norm", None)
    if not isinstance(layers, torch.nn.ModuleList) or not isinstance(norm, torch.nn.Module):
        raise ValueError(f"model: {type(model).__name__}'s decoder has no `layers` list and final `norm`; its hidden "
                         "states cannot be captured")
    return layers, norm


def install_capture(model: PreTrainedModel, layers: tuple[int, ...]) -> None:
    """Hooks that record `model`'s hidden states at the given ``hidden_states`` indices during a
    `model_forward` with a `FeatureCapture` (idempotent per index; inert otherwise). Index i < L: a
    forward pre-hook on decoder layer i (its input); index L: a forward hook on the final norm (its output).
    ValueError for an index outside 0..L."""
    blocks, norm = _decoder_parts(model)
    L = len(blocks)
    bad = [i for i in layers if isinstance(i, bool) or not isinstance(i, int) or not 0 <= i <= L]
    if bad:
        raise ValueError(f"layers: hidden-state indices {bad} outside 0..{L} (the model has {L} layers)")
    done = _CAPTURE_HOOKS.setdefault(model, set())
    for i in sorted(set(layers) - done):
        if i < L:
            blocks[i].register_forward_pre_hook(functools.partial(_record_input, i), with_kwargs=True)
        else:
            norm.register_forward_hook(functools.partial(_record_output, i))
        done.add(i)


def _record_input(index: int, module: torch.nn.Module, args: tuple, kwargs: dict) -> None:
    capture = _ACTIVE_CAPTURE.get()
    if capture is not None and index in capture.layers:
        capture.states[index] = args[0] if args else kwargs["hidden_states"]


def _record_output(index: int, module: torch.nn.Module, args: tuple, output: Tensor) -> None:
    capture = _ACTIVE_CAPTURE.get()
    if capture is not None and index in capture.layers:
        capture.states[index] = output


@functools.lru_cache(maxsize=None)
def _cache_keyword(model_type: type) -> str:
    # transformers renamed `past_key_values` to `cache` in 5.24; 5.17 silently swallows an unknown `cache=`.
    # Per class, once: inspect.signature costs tens of microseconds, every forward would pay it.
    return "cache" if "cache" in inspect.signature(model_type.forward).parameters else "past_key_values"


def tree_forward(
    model: PreTrainedModel,
    cache: TreeCache,
    tokens: Tensor,
    positions: Tensor,
    tree_mask: Tensor,
    *,
    backend: str = "auto",
    logits_to_keep: int = 0,
    causal_rows: int = 0,
    hidden_states: bool = False,
    capture: FeatureCapture | None = None,
) -> Tensor:
    """One forward of `model` over T new nodes per row, their K/V written to the cache's tree region.

    tokens, positions: [B, T] int64; tree_mask: [B, T, W] int32 over the tree region (the new nodes'
    own slots start at ``cache.tree_len``). Checks capacity before anything is written. Returns logits
    [B, T, V] (or the last `logits_to_keep` nodes'), or with ``hidden_states=True`` the decoder's final
    hidden states [B, T, d] and no LM head (a scorer projects only the tokens it needs, with K3).
    causal_rows: see `TreeAttentionMetadata.build`. capture: record hidden states (`FeatureCapture`).
    """
    B, T = tokens.shape
    if B != cache.batch_size:
        raise ValueError(f"tokens: batch of {B} rows, the cache holds {cache.batch_size}")
    cache.reserve(T)
    meta = TreeAttentionMetadata.build(cache.start, cache.length, tree_mask, backend, host_start=cache.host_start,
                                       host_length=cache.host_length, region=cache.tree_len + T,
                                       causal_rows=causal_rows)
    out = model_forward(model, cache, tokens, positions, meta, logits_to_keep, hidden_states=hidden_states,
                        capture=capture)
    cache.advance(T)
    return out


def model_forward(model: PreTrainedModel, cache: Cache, tokens: Tensor, positions: Tensor,
                  meta: TreeAttentionMetadata, logits_to_keep: int = 0, *, hidden_states: bool = False,
                  capture: FeatureCapture | None = None) -> Tensor:
    """The model call of a tree forward: metadata through the forward's keyword arguments. Logits, or
    with `hidden_states` the decoder's final hidden states (the LM head is not run). With `capture`, the
    hooks of `install_capture` record the requested hidden states of every forwarded node into it."""
    if capture is None:
        return _model_call(model, cache, tokens, positions, meta, logits_to_keep, hidden_states)
    capture.states.clear()
    token = _ACTIVE_CAPTURE.set(capture)
    try:
        return _model_call(model, cache, tokens, positions, meta, logits_to_keep, hidden_states)
    finally:
        _ACTIVE_CAPTURE.reset(token)


def _model_call(model: PreTrainedModel, cache: Cache, tokens: Tensor, positions: Tensor, meta: TreeAttentionMetadata,
                logits_to_keep: int, hidden_states: bool) -> Tensor:
    if hidden_states:
        decoder = model.get_decoder()
        out = decoder(input_ids=tokens, position_ids=positions, use_cache=True, specdec_tree=meta,
                      **{_cache_keyword(type(decoder)): cache})
        return out.last_hidden_state
    out = model(input_ids=tokens, position_ids=positions, use_cache=True, logits_to_keep=logits_to_keep,
                specdec_tree=meta, **{_cache_keyword(type(model)): cache})
    return out.logits


def prefill(model: PreTrainedModel, cache: TreeCache, input_ids: Tensor, start: Tensor, *, backend: str = "auto") -> None:
    """Write a left-padded prompt block [B, P] (pads before `start[b]`) into an empty cache and commit it."""
    if cache.tree_len or bool(cache.host_length.any()):
        raise ValueError("cache: prefill needs an empty cache")
    cache.start.copy_(start)
    cache.host_start = start.cpu().numpy().astype(np.int64)  # host sync, once per call: the pads' extent
    B, P = input_ids.shape
    if P == 0:
        return
    positions = (torch.arange(P, device=input_ids.device)[None, :] - cache.start[:, None]).clamp(min=0)
    tree_forward(model, cache, input_ids, positions, prefill_mask(cache.start, P), backend=backend, logits_to_keep=1,
                 causal_rows=P)
    cache.commit_prefix(torch.full((B,), P, dtype=torch.int64, device=cache.device), [P] * B)
