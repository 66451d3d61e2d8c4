"""Test helpers for EAGLE heads: random heads in the published layouts, written by name and shape, and a
generation's first verification by hand."""

from __future__ import annotations

import json

import torch
from safetensors.torch import save_file

import specdec
from specdec.state import DecodeState
from specdec.suppliers.base import root_only
from specdec.verify import PromptBlock
from tests.helpers import make_model

EAGLE_LAYERS = 7  # the default feature layers (2, L // 2, L - 3) = (2, 3, 4) are distinct


def eagle_target(arch: str = "llama", seed: int = 0):
    return make_model(arch, seed=seed, num_hidden_layers=EAGLE_LAYERS)


def head_tensors(target, kind: str, *, draft_ids=None, aux=None, seed: int = 0, scale: float = 0.2,
                 bias: bool = True) -> tuple[dict, dict]:
    """(config.json, tensors) of a random head in the published layout, by name and shape only."""
    c = target.config
    H, V, heads, kv = c.hidden_size, c.vocab_size, c.num_attention_heads, c.num_key_value_heads
    D = getattr(c, "head_dim", None) or H // heads
    I = 80  # noqa: E741 (the layer's MLP width, unlike the target's)
    gen = torch.Generator().manual_seed(seed)
    rnd = lambda *shape: torch.randn(*shape, generator=gen) * scale  # noqa: E731
    norm = lambda: 1 + 0.1 * torch.randn(H, generator=gen)  # noqa: E731
    width = 2 * H if kind == "eagle3" else H
    layer = {"self_attn.q_proj.weight": rnd(heads * D, width), "self_attn.k_proj.weight": rnd(kv * D, width),
             "self_attn.v_proj.weight": rnd(kv * D, width), "self_attn.o_proj.weight": rnd(H, heads * D),
             "mlp.gate_proj.weight": rnd(I, H), "mlp.up_proj.weight": rnd(I, H), "mlp.down_proj.weight": rnd(H, I),
             "post_attention_layernorm.weight": norm()}
    config = {"architectures": ["LlamaForCausalLM"], "hidden_size": H, "num_attention_heads": heads,
              "num_key_value_heads": kv, "head_dim": D, "intermediate_size": I, "vocab_size": V, "rms_norm_eps": 1e-6,
              "rope_theta": 10000.0, "max_position_embeddings": 256, "hidden_act": "silu"}
    if kind == "eagle1":
        tensors = {"layers.0." + k: v for k, v in layer.items()}
        tensors["fc.weight"] = rnd(H, 2 * H)
        if bias:
            tensors["fc.bias"] = rnd(H)
        return config, tensors
    ids = torch.arange(V) if draft_ids is None else torch.as_tensor(draft_ids)
    layer.update({"input_layernorm.weight": norm(), "hidden_norm.weight": norm()})
    aux = list(aux or (2, EAGLE_LAYERS // 2, EAGLE_LAYERS - 3))
    tensors = {"midlayer." + k: v for k, v in layer.items()}
    t2d = torch.zeros(V, dtype=torch.bool)
    t2d[ids] = True
    tensors.update({"fc.weight": rnd(H, len(aux) * H), "norm.weight": norm(), "lm_head.weight": rnd(len(ids), H) * 20,
                    "d2t": ids - torch.arange(len(ids)), "t2d": t2d})
    config.update({"architectures": ["LlamaForCausalLMEagle3"], "draft_vocab_size": len(ids),
                   "eagle_config": {"eagle_aux_hidden_state_layer_ids": aux}})
    return config, tensors


def write_head(path, config: dict, tensors: dict) -> str:
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps(config))
    save_file({k: v.contiguous() for k, v in tensors.items()}, str(path / "model.safetensors"))
    return str(path)


def first_verification(target, head, ids, mask, max_new_tokens: int = 8, room: int = 40):
    """A generation's first verification by hand, for an EAGLE head: (the decode state, the verifier asked for
    the head's features, its cache, the acceptance of a root-only tree with the prompt block)."""
    start = (mask == 0).sum(1)
    state = DecodeState.begin(ids, start, max_new_tokens=max_new_tokens, capacity=ids.shape[1] + room,
                              eos_token_ids=[], pad_token_id=0)
    verifier = specdec.TreeVerifier(target)
    verifier.request_features(head.feature_layers)
    cache = verifier.new_cache(ids.shape[0], state.capacity)
    acc = verifier.verify(root_only(state.root), cache, prompt=PromptBlock(ids[:, :-1], start))
    return state, verifier, cache, acc
