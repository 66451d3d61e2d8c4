"""Verification: one target forward over the tree, acceptance on the device (greedy or lossless sampling),
cache compaction.

`TreeVerifier` is also the drop-in for pipelines that build their own trees (EAGLE/Medusa buffers):
build a `TreeBatch` (for example with `TreeBatch.from_ancestor_mask`), call `verify(tree, cache)`, read
the `Acceptance`; the cache then holds the accepted path and the bonus token is the next root.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import NamedTuple

import numpy as np
import torch
from torch import Tensor
from transformers import DynamicCache, PreTrainedModel

from .attention import FeatureCapture, TreeAttentionMetadata, install, install_capture, model_forward, prefill, tree_forward
from .cache import TreeCache
from .sampling import Sampling, accept_predicted, check_generator, sample_accept
from .tree import TreeBatch, prompt_tree_mask

__all__ = ["Acceptance", "PromptBlock", "TreeVerifier", "greedy_accept", "vocab_size"]


class PromptBlock(NamedTuple):
    """A left-padded prompt block that the first verification of a sequence forwards with its tree."""

    input_ids: Tensor  # [B, P] int64: everything before the first root; pads before start[b]
    start: Tensor  # [B] int64: pad columns per row


@dataclass(frozen=True)
class Acceptance:
    """What the target kept of each row's tree.

    tokens:       [B, A] int64: the accepted candidates, then the bonus token (the next root); -1 padding.
    num_accepted: [B] int64: accepted candidates, the bonus excluded (so a row emits num_accepted + 1).
    node_index:   [B, A] int64: tree node of each accepted token, root first; -1 padding.
    host_tokens, host_num_accepted, host_node_index: the same as numpy arrays, brought back by the
    step's one host sync.
    features:     [B, A, F] or None: when the verifier was asked for hidden states (`TreeVerifier.
                  request_features`), the target's hidden states at each accepted node (node_index order,
                  root first; columns past num_accepted + 1 hold any values): features[:, j] is the state
                  that predicted tokens[:, j]. F = d * the number of requested indices (concatenated).
    prompt_features: [B, P, F] or None: the same for the prompt block forwarded with the first tree
                  (column i predicted prompt token i + 1; columns before a row's padding end hold any values).
    A = max(num_accepted) + 1. Example: chain root->x->y, target agrees with x only and predicts z after
    x: tokens [[x, z]], num_accepted [1], node_index [[0, 1]]; features [[h(root), h(x)]].
    """

    tokens: Tensor  # [B, A] int64
    num_accepted: Tensor  # [B] int64
    node_index: Tensor  # [B, A] int64
    host_tokens: np.ndarray  # [B, A] int64
    host_num_accepted: np.ndarray  # [B] int64
    host_node_index: np.ndarray | None = None  # [B, A] int64
    features: Tensor | None = None  # [B, A, F]
    prompt_features: Tensor | None = None  # [B, P, F]

    @property
    def width(self) -> int:
        return self.tokens.shape[1]


def vocab_size(model: PreTrainedModel) -> int:
    """Rows of the model's output embedding (what its logits cover)."""
    head = model.get_output_embeddings()
    return head.weight.shape[0] if head is not None else model.config.get_text_config().vocab_size


def greedy_accept(tree: TreeBatch, logits: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Deepest node whose whole path agrees with the target's argmax, then the bonus token.

    logits: [B, T, V] target logits at every node. Node i (i > 0) is correct iff ``tokens[i] ==
    argmax(logits[parents[i]])``; siblings carry distinct tokens, so the fully-correct nodes form one chain.
    Returns (tokens [B, L], num_accepted [B], node_index [B, L]) with L = tree.depth_bound + 1, on the
    device and without a host sync.
    """
    return accept_predicted(tree, logits.argmax(-1))


class TreeVerifier:
    """Verify candidate trees with an unmodified Hugging Face causal LM.

    temperature 0.0 is greedy verification: the output equals greedy autoregressive decoding. temperature
    > 0 (with top_k, top_p: transformers' warpers) is lossless tree rejection sampling (`specdec.sampling`):
    the emitted tokens follow the target's own sampling distribution; `generator` (a torch.Generator on
    the target's device, or None for torch's default) makes runs reproducible. These are the verifier's
    defaults; a `verify` call may pass its own (`SpeculativeGenerator.generate` passes each call's), so
    one verifier serves calls with different settings and holds no state of any call.
    """

    def __init__(self, target: PreTrainedModel, temperature: float = 0.0, top_k: int | None = None,
                 top_p: float | None = None, *, generator: torch.Generator | None = None, backend: str = "auto"):
        sampling = Sampling(temperature, top_k, top_p)
        check_generator(generator, target.device)
        install(target, "target")
        self.model = target
        self.sampling, self.generator = sampling, generator
        self.backend = backend
        self.vocab_size = vocab_size(target)
        self.feature_layers: tuple[int, ...] = ()

    def request_features(self, layers: tuple[int, ...] | None) -> None:
        """From now on, return the target's hidden states at these indices of transformers'
        ``hidden_states`` tuple (`FeatureCapture`'s convention) in every `Acceptance` (None or (): none).
        ValueError for an index outside 0..num_layers."""
        layers = tuple(layers or ())
        if layers:
            install_capture(self.model, layers)
        self.feature_layers = layers

    @property
    def temperature(self) -> float:
        return self.sampling.temperature

    def new_cache(self, batch_size: int, capacity: int) -> TreeCache:
        return TreeCache.for_model(self.model, batch_size, capacity)

    def prefill(self, cache: TreeCache, input_ids: Tensor, start: Tensor) -> None:
        """Commit a left-padded prompt block (everything before the first root) to an empty cache.

        input_ids: [B, P] int64, B the cache's batch size; start: [B] int64, the pad columns of each row
        (0 <= start[b] <= P). Pad columns may hold any value; the others must be ids of the target's
        vocabulary. ValueError/TypeError naming the argument otherwise, before the cache changes.
        """
        if not isinstance(cache, TreeCache):
            raise TypeError(f"cache: expected a TreeCache, got {type(cache).__name__}")
        input_ids = self._check_block(input_ids, start, cache)
        prefill(self.model, cache, input_ids, start, backend=self.backend)

    def _check_block(self, ids: object, start: object, cache: TreeCache) -> Tensor:
        """Check a left-padded prompt block for `cache` (see `prefill`); returns the ids with 0 in the pad
        columns. One host sync (the data checks), once per sequence."""
        B, device = cache.batch_size, cache.device
        if not isinstance(ids, Tensor) or ids.ndim != 2 or ids.shape[0] != B:
            shape = tuple(ids.shape) if isinstance(ids, Tensor) else type(ids).__name__
            raise ValueError(f"input_ids: expected a [{B}, P] tensor (the cache's {B} rows), got {shape}")
        if ids.dtype != torch.int64 or ids.device != device:
            raise TypeError(f"input_ids: expected int64 on {device}, got {ids.dtype} on {ids.device}")
        if not isinstance(start, Tensor) or start.shape != (B,) or start.dtype != torch.int64 or start.device != device:
            got = f"{tuple(start.shape)} {start.dtype} on {start.device}" if isinstance(start, Tensor) else repr(start)
            raise ValueError(f"start: expected a [{B}] int64 tensor on {device}, got {got}")
        P = ids.shape[1]
        if bool(((start < 0) | (start > P)).any()):
            raise ValueError(f"start: pad counts must lie in [0, {P}], got {start.tolist()}")
        real = torch.arange(P, device=device)[None, :] >= start[:, None]  # [B, P]
        if bool((((ids < 0) | (ids >= self.vocab_size)) & real).any()):
            raise ValueError(f"input_ids: token ids outside the target's vocabulary [0, {self.vocab_size}) after "
                             "the pad columns")
        return torch.where(real, ids, 0)

    def verify(self, tree: TreeBatch, cache: TreeCache | DynamicCache, *, validate: bool = True,
               prompt: PromptBlock | None = None, sampling: Sampling | None = None,
               generator: torch.Generator | None = None) -> Acceptance:
        """Forward the tree, accept (greedily or by sampling), keep the accepted path in `cache`.

        `cache` is a `TreeCache` (any batch size, ragged rows), or, for pipelines that keep their own,
        a transformers `DynamicCache` with batch size 1 (its layers are cut to the accepted path).
        With ``validate=True`` (the default for pipelines building their own trees) the tree's data is
        checked first (topological order, siblings, token range). All errors are raised before the cache
        changes. Performs the step's one host sync (bringing the accepted tokens back).
        prompt: for the first tree of an empty `TreeCache`, the prompt block before its root, forwarded
        and committed in the same target forward (one forward fewer than `prefill` then `verify`).
        sampling, generator: this call's sampling settings and generator (on the target's device); None: the
        verifier's own, given when it was built.
        """
        tree.check_shapes()
        if sampling is None:
            sampling = self.sampling
        elif not isinstance(sampling, Sampling):
            raise ValueError(f"sampling: expected a specdec Sampling, got {type(sampling).__name__}")
        if generator is None:
            generator = self.generator
        else:
            check_generator(generator, self.model.device)
        if prompt is not None:
            prompt = self._check_prompt(prompt, tree, cache)
        if not isinstance(cache, (TreeCache, DynamicCache)):
            raise TypeError(f"cache: expected a TreeCache or a DynamicCache, got {type(cache).__name__}")
        batch = cache.batch_size if isinstance(cache, TreeCache) else 1
        if tree.batch_size != batch:
            raise ValueError(f"tree: batch of {tree.batch_size} rows, the cache holds {batch}"
                             + ("" if isinstance(cache, TreeCache) else " (a DynamicCache: use a TreeCache for batches)"))
        if isinstance(cache, TreeCache) and tree.device != cache.device:
            raise ValueError(f"tree: on {tree.device}, the cache on {cache.device}")
        if isinstance(cache, DynamicCache) and any(cache.is_sliding):
            raise ValueError("cache: sliding-window layers are not supported by tree attention")
        if validate:
            tree.validate(self.vocab_size)
        if isinstance(cache, DynamicCache):
            return self._verify_dynamic(tree, cache, sampling, generator)
        if cache.tree_len:
            raise ValueError("cache: it holds an uncommitted tree region; commit or roll it back first")
        capture = FeatureCapture(self.feature_layers) if self.feature_layers else None
        width = 0  # prompt columns before the tree in this forward
        if prompt is not None and prompt.input_ids.shape[1]:
            logits = self._forward_with_prompt(tree, cache, prompt, capture)
            width = prompt.input_ids.shape[1]
        else:
            if prompt is not None:  # a one-token prompt: nothing before the root but its row offsets
                self.prefill(cache, prompt.input_ids, prompt.start)
            positions = tree.positions(cache.positions())
            logits = tree_forward(self.model, cache, tree.tokens, positions, tree.ancestor_mask, backend=self.backend,
                                  capture=capture)
        acc = self._accept(tree, logits, sampling, generator)
        cache.commit(acc.node_index, acc.num_accepted + 1, acc.host_num_accepted + 1, acc.host_node_index)
        return acc if capture is None else _with_features(acc, capture.features(), width, prompt is not None)

    def _check_prompt(self, prompt: PromptBlock, tree: TreeBatch, cache: TreeCache | DynamicCache) -> PromptBlock:
        """The prompt block, checked (`_check_block`) for the tree's batch and an empty `cache`."""
        if not isinstance(cache, TreeCache):
            raise ValueError("prompt: a prompt block rides only on a TreeCache (prefill a DynamicCache yourself)")
        if tree.batch_size != cache.batch_size:
            raise ValueError(f"tree: batch of {tree.batch_size} rows, the cache holds {cache.batch_size}")
        if cache.tree_len or cache.host_length.any():
            raise ValueError("cache: a prompt block needs an empty cache")
        try:
            return PromptBlock(self._check_block(prompt.input_ids, prompt.start, cache), prompt.start)
        except (ValueError, TypeError) as err:
            raise ValueError(f"prompt: {err}") from None

    def _forward_with_prompt(self, tree: TreeBatch, cache: TreeCache, prompt: PromptBlock,
                             capture: FeatureCapture | None) -> Tensor:
        """One target forward over the prompt block and the tree as one region; the block is committed
        where it lies and the tree stays the region. Returns the tree's logits [B, T, V]."""
        ids, start = prompt
        P, T = ids.shape[1], tree.size
        cache.start.copy_(start)
        cache.host_start = start.cpu().numpy().astype(np.int64)  # host sync, once per sequence: the pads' extent
        columns = torch.arange(P, device=ids.device)[None, :] - start[:, None]
        positions = torch.cat([columns.clamp(min=0), tree.positions(P - start)], 1)
        mask = prompt_tree_mask(start, P, tree.ancestor_mask)
        # A root-only tree continues the prompt's chain: the whole block is causal on unpadded rows.
        logits = tree_forward(self.model, cache, torch.cat([ids, tree.tokens], 1), positions, mask,
                              backend=self.backend, logits_to_keep=T, causal_rows=P + 1 if T == 1 else P,
                              capture=capture)
        cache.absorb_prefix(P)
        return logits

    def _accept(self, tree: TreeBatch, logits: Tensor, sampling: Sampling,
                generator: torch.Generator | None) -> Acceptance:
        if sampling.greedy:
            tokens, num_accepted, node_index = greedy_accept(tree, logits)
        else:
            tokens, num_accepted, node_index = sample_accept(tree, logits, sampling, generator)
        L = tokens.shape[1]
        host = torch.cat([num_accepted[:, None], tokens, node_index], 1).cpu().numpy()  # the step's one host sync
        width = int(host[:, 0].max()) + 1
        return Acceptance(tokens[:, :width], num_accepted, node_index[:, :width], host[:, 1:width + 1], host[:, 0],
                          host[:, L + 1:L + 1 + width])

    def _verify_dynamic(self, tree: TreeBatch, cache: DynamicCache, sampling: Sampling,
                        generator: torch.Generator | None) -> Acceptance:
        """Batch-1 verification on a DynamicCache: the tree is appended, then cut to the accepted path."""
        past = cache.get_seq_length()
        length = torch.full((1,), past, dtype=torch.int64, device=tree.device)
        meta = TreeAttentionMetadata.build(torch.zeros_like(length), length, tree.ancestor_mask, self.backend,
                                           host_start=np.zeros(1, dtype=np.int64),
                                           host_length=np.full(1, past, dtype=np.int64), region=tree.size)
        capture = FeatureCapture(self.feature_layers) if self.feature_layers else None
        logits = model_forward(self.model, cache, tree.tokens, tree.positions(length), meta, capture=capture)
        acc = self._accept(tree, logits, sampling, generator)
        keep = torch.cat([torch.arange(past, device=tree.device), past + acc.node_index[0]])
        for layer in cache.layers:
            layer.keys = layer.keys.index_select(2, keep)
            layer.values = layer.values.index_select(2, keep)
        return acc if capture is None else _with_features(acc, capture.features(), 0, False)


def _with_features(acc: Acceptance, features: Tensor, width: int, with_prompt: bool) -> Acceptance:
    """`acc` with the hidden states of its accepted nodes (and of the prompt block when one was forwarded).

    features: [B, width + T, F], the forward's captured states: `width` prompt columns, then the tree's T nodes.
    """
    if width == 0 and features.shape[1] == 1 and acc.node_index.shape[1] == 1:
        # a root-only tree (a planner's plain step): its one node is every row's accepted path, no gather
        # to run (at batch 1 on the 2-core CPU the gather and its index cost ~40 us, 1% of a plain step)
        return replace(acc, features=features)
    index = (acc.node_index.clamp(min=0) + width)[:, :, None].expand(-1, -1, features.shape[-1])  # [B, A, F]
    return replace(acc, features=features.gather(1, index),
                   prompt_features=features[:, :width] if with_prompt else None)
