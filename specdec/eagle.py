"""EAGLE heads: a one-layer drafter that reads the target's own hidden states (EAGLE-1/2 and EAGLE-3).

The head is this package's own small torch module (not a transformers model): embedding lookup, the
feature projection `fc`, one Llama-style decoder layer whose attention runs `ops.tree_attention` on the
head's own one-layer `TreeCache`, and the LM head. A Hugging Face forward costs about a millisecond of
Python on a CPU whatever the model's size; this one costs what its arithmetic costs.

**Pairs.** The head reads pairs (token x_{i+1}, feature f_i): the embedding of a token and the state that
predicted it (the target's hidden state at position i for committed tokens, the head's own output for
drafted ones). Its output at a pair predicts the token after x_{i+1}. Pair i sits at RoPE position i.
Example: committed tokens a b c with target features f_a f_b and the root c: pairs (b, f_a), (c, f_b);
the output at (c, f_b) gives the root's children; a child d is then read as (d, output at (c, f_b)).

**Layouts** (`EagleHead.from_pretrained`, safetensors + config.json only):

* EAGLE-3: ``fc.weight`` [H, k * H_t] over k target hidden states concatenated (default k = 3: indices
  2, L // 2, L - 3 of transformers' ``hidden_states`` tuple, index 0 the embedding output; the config's
  ``eagle_aux_hidden_state_layer_ids``, top level or under ``eagle_config``, overrides them);
  ``midlayer.{input_layernorm, hidden_norm, self_attn.{q,k,v,o}_proj, post_attention_layernorm,
  mlp.{gate,up,down}_proj}`` whose q/k/v read ``cat(input_layernorm(emb), hidden_norm(h))`` (width 2H);
  ``norm``; ``lm_head.weight`` [draft_vocab, H]; ``d2t`` int64 [draft_vocab] (target id = draft id +
  d2t[draft id]); ``t2d`` bool [vocab] (not used at inference). The head feeds back its pre-norm output.
  ``norm_before_residual`` (config, default false) takes the residual after ``hidden_norm``.
* EAGLE-1/2: ``fc.weight`` [H, 2H] (and ``fc.bias``) over ``cat(emb, feature)``, ``layers.0.*`` a decoder
  layer without ``input_layernorm``, no final norm; the target's LM head; the feature is the target's
  last hidden state after its final norm (``hidden_states`` index L).

Embeddings come from the target (an ``embed_tokens.weight`` in the file is used only when the head's
width differs from the target's). Anything missing, mis-shaped, unexpected or not fitting the target is a
`ValueError` naming the tensor or config field, raised before anything runs.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
import torch.nn.functional as F
from safetensors.torch import save_file
from torch import Tensor, nn
from transformers import LlamaConfig, PreTrainedModel
from transformers.activations import ACT2FN
from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

from . import ops
from .attention import TreeAttentionMetadata
from .cache import TreeCache
from .eagle_checkpoint import EagleConfig, check_config, default_aux_layers, read_checkpoint
from .verify import vocab_size

__all__ = ["EagleConfig", "EagleHead", "default_aux_layers"]

WEIGHTS = "model.safetensors"


class _Layer(nn.Module):
    """The head's decoder layer (Llama layout); `input_layernorm`/`hidden_norm` only for EAGLE-3."""

    def __init__(self, c: EagleConfig):
        super().__init__()
        H, width = c.hidden_size, 2 * c.hidden_size if c.kind == "eagle3" else c.hidden_size
        self.self_attn = nn.Module()
        self.self_attn.q_proj = nn.Linear(width, c.num_heads * c.head_dim, bias=c.attention_bias)
        self.self_attn.k_proj = nn.Linear(width, c.num_kv_heads * c.head_dim, bias=c.attention_bias)
        self.self_attn.v_proj = nn.Linear(width, c.num_kv_heads * c.head_dim, bias=c.attention_bias)
        self.self_attn.o_proj = nn.Linear(c.num_heads * c.head_dim, H, bias=c.attention_bias)
        self.mlp = nn.Module()
        self.mlp.gate_proj = nn.Linear(H, c.intermediate_size, bias=False)
        self.mlp.up_proj = nn.Linear(H, c.intermediate_size, bias=False)
        self.mlp.down_proj = nn.Linear(c.intermediate_size, H, bias=False)
        self.post_attention_layernorm = _RMSNorm(H, c.rms_norm_eps)
        if c.kind == "eagle3":
            self.input_layernorm = _RMSNorm(H, c.rms_norm_eps)
            self.hidden_norm = _RMSNorm(H, c.rms_norm_eps)


class _RMSNorm(nn.Module):
    def __init__(self, size: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.eps = eps

    def forward(self, x: Tensor) -> Tensor:
        return F.rms_norm(x, (x.shape[-1],), self.weight, self.eps)


class EagleHead(nn.Module):
    """An EAGLE-1/2 or EAGLE-3 head bound to its target (whose embeddings, and for EAGLE-1 LM head, it uses).

    Build it with `from_pretrained(path, target)` (a published checkpoint) or `initialize(target, ...)`
    (random weights, for training); `save_pretrained(path)` writes the layout `from_pretrained` reads.
    The decoding side (cache, backlog, trees) is `specdec.suppliers.eagle.EagleRunner`.
    """

    def __init__(self, config: EagleConfig, target: PreTrainedModel, embed: Tensor | None = None):
        super().__init__()
        c = self.config = config
        self.fc = nn.Linear(len(c.aux_layers) * c.target_hidden_size if c.kind == "eagle3" else 2 * c.hidden_size,
                            c.hidden_size, bias=c.fc_bias)
        layer = _Layer(c)
        if c.kind == "eagle3":
            self.midlayer = layer
            self.norm = _RMSNorm(c.hidden_size, c.rms_norm_eps)
            self.lm_head = nn.Linear(c.hidden_size, c.draft_vocab_size, bias=False)
            self.register_buffer("d2t", torch.zeros(c.draft_vocab_size, dtype=torch.int64))
            self.register_buffer("t2d", torch.zeros(c.vocab_size, dtype=torch.bool))
        else:
            self.layers = nn.ModuleList([layer])
        # The target's tensors are read (detached views: not parameters of the head), never copied or saved.
        self._embed = (embed if embed is not None else target.get_input_embeddings().weight).detach()  # [V, H]
        self.own_embedding = embed is not None
        head = target.get_output_embeddings().weight
        self._target_head = head.detach() if c.kind == "eagle1" else None  # [V, H]
        self._rope_inv_freq, self._rope_scale = _rope(c)
        self._to_target: Tensor | None = None  # [Vd] int64 target id of each draft id; None: the identity
        self.scale = c.head_dim ** -0.5
        self.to(device=target.device, dtype=target.dtype)
        self._rope_inv_freq = self._rope_inv_freq.to(target.device)

    # ------------------------------------------------------------------ construction
    @classmethod
    def initialize(cls, target: PreTrainedModel, *, kind: str = "eagle3", draft_vocab: Tensor | None = None,
                   aux_layers: tuple[int, ...] | None = None, intermediate_size: int | None = None,
                   seed: int = 0) -> "EagleHead":
        """A randomly initialised head of the target's width (EAGLE-3: lm_head and final norm start from
        the target's own, restricted to `draft_vocab`, the sorted target ids [Vd] int64 it may propose;
        None: the whole vocabulary)."""
        tc = target.config.get_text_config()
        L, V = tc.num_hidden_layers, vocab_size(target)
        ids = torch.arange(V) if draft_vocab is None else torch.as_tensor(draft_vocab, dtype=torch.int64).cpu()
        head_dim = getattr(tc, "head_dim", None) or tc.hidden_size // tc.num_attention_heads
        rope = dict(getattr(tc, "rope_parameters", None) or {"rope_type": "default", "rope_theta": 10000.0})
        config = EagleConfig(kind, tc.hidden_size, tc.num_attention_heads, tc.num_key_value_heads, head_dim,
                             intermediate_size or tc.intermediate_size, V, len(ids), tc.hidden_size,
                             tuple(aux_layers or default_aux_layers(L)) if kind == "eagle3" else (L,),
                             rms_norm_eps=tc.rms_norm_eps, hidden_act=tc.hidden_act, fc_bias=kind == "eagle1",
                             max_position_embeddings=tc.max_position_embeddings, rope=rope)
        check_config(config, target)
        head = cls(config, target)
        gen = torch.Generator(device=target.device).manual_seed(seed)
        with torch.no_grad():
            for m in head.modules():
                if isinstance(m, nn.Linear):
                    nn.init.normal_(m.weight, std=0.02, generator=gen)
                    if m.bias is not None:
                        m.bias.zero_()
            if kind == "eagle3":
                head.lm_head.weight.copy_(target.get_output_embeddings().weight[ids.to(target.device)])
                norm = getattr(target.get_decoder(), "norm", None)
                if norm is not None and getattr(norm, "weight", None) is not None:
                    head.norm.weight.copy_(norm.weight)
                head.set_vocab(ids)
        return head

    def set_vocab(self, draft_to_target: Tensor) -> None:
        """EAGLE-3: the draft vocabulary, as the sorted target ids [Vd] int64 (writes d2t and t2d)."""
        ids = torch.as_tensor(draft_to_target, dtype=torch.int64, device=self.d2t.device)
        if ids.shape != self.d2t.shape or bool((ids[1:] <= ids[:-1]).any()) or int(ids[0]) < 0 \
                or int(ids[-1]) >= self.config.vocab_size:
            raise ValueError(f"draft_to_target: expected {self.d2t.shape[0]} increasing ids in [0, "
                             f"{self.config.vocab_size})")
        self.d2t.copy_(ids - torch.arange(len(ids), device=ids.device))
        self.t2d.zero_()
        self.t2d[ids] = True
        self._set_map()

    def _set_map(self) -> None:
        if self.config.kind == "eagle1":
            return
        ids = torch.arange(self.config.draft_vocab_size, device=self.d2t.device) + self.d2t
        identity = self.config.draft_vocab_size == self.config.vocab_size and bool((self.d2t == 0).all())
        self._to_target = None if identity else ids

    @classmethod
    def from_pretrained(cls, path: str | Path, target: PreTrainedModel) -> "EagleHead":
        """Load a published EAGLE-3 or EAGLE-1/2 head (module docstring) for `target`, in its dtype and on
        its device. ValueError naming the file, tensor or field for anything that does not fit."""
        config, tensors = read_checkpoint(Path(path), target)
        embed = tensors.pop("embed_tokens.weight", None)
        head = cls(config, target, embed=embed.to(device=target.device, dtype=target.dtype)
                   if embed is not None and config.hidden_size != config.target_hidden_size else None)
        head.load_state_dict(tensors, strict=True)
        head._set_map()
        return head.eval()

    def save_pretrained(self, path: str | Path, *, dtype: torch.dtype | None = None) -> None:
        """Write config.json and model.safetensors in the published layout (`dtype`: of the float tensors)."""
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        state = {k: (v.to(dtype) if dtype is not None and v.is_floating_point() else v).detach().cpu().contiguous()
                 for k, v in self.state_dict().items()}
        save_file(state, str(path / WEIGHTS), metadata={"format": "pt"})
        (path / "config.json").write_text(json.dumps(self.config.to_json(), indent=1))

    # ------------------------------------------------------------------ the forward, in pieces
    @property
    def layer(self) -> _Layer:
        """The decoder layer: ``midlayer`` (EAGLE-3) or ``layers.0`` (EAGLE-1/2)."""
        return self.midlayer if self.config.kind == "eagle3" else self.layers[0]

    @property
    def feature_layers(self) -> tuple[int, ...]:
        return self.config.aux_layers

    @property
    def embed(self) -> Tensor:
        """[V, H]: the token embedding (the target's, unless the checkpoint brought its own)."""
        return self._embed

    def reads(self, target: PreTrainedModel) -> bool:
        """Whether this head was built for `target` (it reads that model's embedding matrix)."""
        if self.own_embedding:
            return self.config.target_hidden_size == target.config.get_text_config().hidden_size
        return self._embed.data_ptr() == target.get_input_embeddings().weight.data_ptr()

    def layer_inputs(self, tokens: Tensor, features: Tensor, project: bool) -> tuple[Tensor, Tensor]:
        """(attention input [B, N, 2H or H], residual [B, N, H]) of pairs (tokens [B, N] int64, features
        [B, N, F]): target features (`project`, F = k * H_t for EAGLE-3) or the head's own outputs (F = H)."""
        emb = F.embedding(tokens, self._embed)  # [B, N, H]
        if self.config.kind == "eagle1":
            x = self.fc(torch.cat([emb, features], -1))
            return x, x
        h = self.fc(features) if project else features
        layer = self.layer
        normed = layer.hidden_norm(h)
        residual = normed if self.config.norm_before_residual else h
        return torch.cat([layer.input_layernorm(emb), normed], -1), residual

    def qkv(self, x: Tensor, positions: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """q [B, Hq, N, D], k, v [B, Hkv, N, D] with RoPE at `positions` [B, N] int64."""
        B, N, _ = x.shape
        c, attn = self.config, self.layer.self_attn
        q = attn.q_proj(x).view(B, N, c.num_heads, c.head_dim).transpose(1, 2)
        k = attn.k_proj(x).view(B, N, c.num_kv_heads, c.head_dim).transpose(1, 2)
        v = attn.v_proj(x).view(B, N, c.num_kv_heads, c.head_dim).transpose(1, 2)
        freqs = positions[:, None, :, None].to(torch.float32) * self._rope_inv_freq  # [B, 1, N, D/2]
        cos = (freqs.cos() * self._rope_scale).to(x.dtype)
        sin = (freqs.sin() * self._rope_scale).to(x.dtype)
        return _rotate(q, cos, sin), _rotate(k, cos, sin), v

    def finish(self, attn: Tensor, residual: Tensor) -> Tensor:
        """The layer's output [B, N, H] from the attention's [B, Hq, N, D] and the residual [B, N, H]."""
        B, _, N, _ = attn.shape
        layer = self.layer
        h = residual + layer.self_attn.o_proj(attn.transpose(1, 2).reshape(B, N, -1))
        x = layer.post_attention_layernorm(h)
        mlp = layer.mlp
        act = F.silu if self.config.hidden_act == "silu" else ACT2FN[self.config.hidden_act]
        return h + mlp.down_proj(act(mlp.gate_proj(x)) * mlp.up_proj(x))

    def draft_logits(self, hidden: Tensor) -> Tensor:
        """[..., Vd] over the draft vocabulary (EAGLE-1: the target's whole vocabulary)."""
        if self.config.kind == "eagle1":
            return F.linear(hidden, self._target_head)
        return self.lm_head(self.norm(hidden))

    def logits(self, hidden: Tensor) -> Tensor:
        """[..., V] over the target's vocabulary; tokens outside the draft vocabulary get -inf."""
        return self.widen(self.draft_logits(hidden))

    def widen(self, logits: Tensor) -> Tensor:
        """`draft_logits` [..., Vd] spread over the target's vocabulary [..., V] (-inf outside the draft's)."""
        if self._to_target is None:
            return logits
        out = logits.new_full((*logits.shape[:-1], self.config.vocab_size), float("-inf"))
        return out.index_copy_(-1, self._to_target, logits)

    @property
    def draft_ids(self) -> Tensor | None:
        """[Vd] int64, the target id of each draft id; None when `draft_logits` are over the target's ids."""
        return self._to_target

    def forward(self, tokens: Tensor, features: Tensor, positions: Tensor, cache: TreeCache,
                mask: Tensor | ops.SdpaPlan, rope: Tensor, *, project: bool, backend: str = "auto") -> Tensor:
        """One tree forward over N pairs per row; their K/V go to the cache's tree region (as a model's
        `attention.tree_forward`). Returns the head's output [B, N, H] (`logits` projects it).

        tokens, positions: [B, N] int64; features: [B, N, F]; mask: the [B, N, W] int32 ancestor bitmask
        over the tree region (any backend), or an `ops.SdpaPlan` the caller built for the sdpa backend;
        rope: `rope_table` covering every position. Uses fused q/k/v and gate/up weights (`_fused`).
        """
        B, N = tokens.shape
        c = self.config
        cache.reserve(N)
        x, residual = self.layer_inputs(tokens, features, project)
        wqkv, bqkv, wgu = self._fused()
        qkv = F.linear(x, wqkv, bqkv).view(B, N, -1, c.head_dim).transpose(1, 2)  # [B, Hq + 2 Hkv, N, D]
        rot = c.num_heads + c.num_kv_heads
        cos, sin = rope[:, positions][:, :, None]  # [B, 1, N, D] each
        qk = qkv[:, :rot]
        qk = qk * cos + torch.cat([-qk[..., c.head_dim // 2:], qk[..., :c.head_dim // 2]], -1) * sin
        keys, values = cache.update(qk[:, c.num_heads:], qkv[:, rot:], 0)
        if isinstance(mask, ops.SdpaPlan):
            attn = ops.tree_attention_sdpa(qk[:, :c.num_heads], keys, values, mask, scale=self.scale)
        else:
            meta = TreeAttentionMetadata.build(cache.start, cache.length, mask, backend, host_start=cache.host_start,
                                               host_length=cache.host_length, region=cache.tree_len + N)
            attn = ops.tree_attention(qk[:, :c.num_heads], keys, values, meta.start, meta.length, meta.tree_mask,
                                      scale=self.scale, backend=backend, plan=meta.plan)
        cache.advance(N)
        layer = self.layer
        h = residual + layer.self_attn.o_proj(attn.transpose(1, 2).reshape(B, N, -1))
        gate, up = F.linear(layer.post_attention_layernorm(h), wgu).chunk(2, -1)
        act = F.silu if c.hidden_act == "silu" else ACT2FN[c.hidden_act]
        return h + layer.mlp.down_proj(act(gate) * up)

    def _fused(self) -> tuple[Tensor, Tensor | None, Tensor]:
        """q/k/v weights [(Hq + 2 Hkv) D, width] (and biases) and gate/up weights [2 I, H] stacked, so the
        decoding forward runs two matmuls where the layer has five; rebuilt whenever a parameter changed:
        replaced (its storage) or updated in place (training does; its version counter). A head created
        under `torch.inference_mode` has inference tensors, which keep no version counter: their storage
        alone is the key, and `load_state_dict` (which copies in place) drops the cache itself."""
        attn, mlp = self.layer.self_attn, self.layer.mlp
        parts = (attn.q_proj, attn.k_proj, attn.v_proj, mlp.gate_proj, mlp.up_proj)
        tensors = [p.weight for p in parts] + [p.bias for p in parts[:3] if p.bias is not None]
        versions = tuple((t.data_ptr(), -1 if t.is_inference() else t._version) for t in tensors)
        if getattr(self, "_fused_cache", (None,))[0] != versions:
            with torch.no_grad():
                wqkv = torch.cat([p.weight for p in parts[:3]])
                bqkv = torch.cat([p.bias for p in parts[:3]]) if attn.q_proj.bias is not None else None
                wgu = torch.cat([mlp.gate_proj.weight, mlp.up_proj.weight])
            self._fused_cache = (versions, (wqkv, bqkv, wgu))
        return self._fused_cache[1]

    def load_state_dict(self, state_dict, strict: bool = True, assign: bool = False):
        self.__dict__.pop("_fused_cache", None)  # in-place copies: an inference tensor's version does not move
        return super().load_state_dict(state_dict, strict=strict, assign=assign)

    def rope_table(self, positions: int) -> Tensor:
        """[2, positions, D]: cos and sin of the head's RoPE at positions 0..positions-1, each half repeated
        (the rotate-half layout), attention scaling applied, in the head's dtype."""
        freqs = torch.arange(positions, device=self._rope_inv_freq.device, dtype=torch.float32)[:, None] \
            * self._rope_inv_freq  # [P, D/2]
        freqs = torch.cat([freqs, freqs], -1)
        return (torch.stack([freqs.cos(), freqs.sin()]) * self._rope_scale).to(self.fc.weight.dtype)

    def new_cache(self, batch_size: int, capacity: int) -> TreeCache:
        c = self.config
        return TreeCache(1, batch_size, c.num_kv_heads, c.head_dim, capacity, dtype=self.fc.weight.dtype,
                         device=self.fc.weight.device)


def _rotate(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """RoPE in the Llama (half-split) convention; cos, sin: [B, 1, N, D/2]."""
    a, b = x.chunk(2, dim=-1)
    return torch.cat([a * cos - b * sin, b * cos + a * sin], -1)


def _rope(c: EagleConfig) -> tuple[Tensor, float]:
    """(inv_freq [D/2] float32, attention scaling) of the head's own RoPE, by transformers' rules."""
    params = dict(c.rope or {"rope_type": "default", "rope_theta": 10000.0})
    kind = params.get("rope_type", params.get("type", "default"))
    if kind in ("dynamic", "longrope"):
        raise ValueError(f"rope_parameters: rope type {kind!r} depends on the sequence length; not supported")
    config = LlamaConfig(hidden_size=c.num_heads * c.head_dim, num_attention_heads=c.num_heads, head_dim=c.head_dim,
                         max_position_embeddings=c.max_position_embeddings, rope_parameters=params)
    rotary = LlamaRotaryEmbedding(config)
    return rotary.inv_freq.float(), float(rotary.attention_scaling)
