"""The EAGLE head's shape (`EagleConfig`, checked against the target by `check_config`) and reading published
EAGLE head checkpoints: config.json and safetensors, checked against the layouts `specdec.eagle` builds and
against the target before any tensor is used. Never unpickles: a ``.bin``/``.pt`` checkpoint is refused
with the command that converts it."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors import safe_open
from torch import Tensor
from transformers import PreTrainedModel

from .records import read_json
from .verify import vocab_size

__all__ = ["EagleConfig", "check_config", "default_aux_layers", "read_checkpoint", "expected_tensors"]

KINDS = ("eagle3", "eagle1")
_CONVERT = ("convert it once with torch and safetensors: python -c \"import torch; from safetensors.torch import "
            "save_file; save_file({k: v.contiguous() for k, v in torch.load('{name}', weights_only=True).items()}, "
            "'model.safetensors')\" (specdec never unpickles a checkpoint)")


def default_aux_layers(num_layers: int) -> tuple[int, ...]:
    """EAGLE-3's default feature layers: the inputs of layers 2, L // 2 and L - 3."""
    return (2, num_layers // 2, num_layers - 3)


@dataclass(frozen=True)
class EagleConfig:
    """The head's shape. `aux_layers`: indices of the target's ``hidden_states`` tuple it reads (EAGLE-1:
    (L,), the post-norm last state). `rope`: the head's own RoPE parameters (transformers' format)."""

    kind: str
    hidden_size: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    draft_vocab_size: int
    target_hidden_size: int
    aux_layers: tuple[int, ...]
    rms_norm_eps: float = 1e-6
    hidden_act: str = "silu"
    attention_bias: bool = False
    fc_bias: bool = False
    norm_before_residual: bool = False
    max_position_embeddings: int = 2048
    rope: dict | None = None
    # Greedy decoding ranks candidates by logits / greedy_temperature (config.json:
    # specdec_greedy_temperature; 1.0, EAGLE-2's ranking, when absent): a head trained on the target's
    # distribution is as unsure as the target, while greedy verification accepts its argmax far more often
    # than that distribution says (training.calibrate_greedy_temperature fits it).
    greedy_temperature: float = 1.0

    def to_json(self) -> dict:
        """config.json in the published layout's field names (with the fields this loader reads)."""
        out = {"architectures": ["LlamaForCausalLMEagle3" if self.kind == "eagle3" else "LlamaForCausalLM"],
               "model_type": "llama", "hidden_size": self.hidden_size, "num_attention_heads": self.num_heads,
               "num_key_value_heads": self.num_kv_heads, "head_dim": self.head_dim,
               "intermediate_size": self.intermediate_size, "num_hidden_layers": 1, "vocab_size": self.vocab_size,
               "rms_norm_eps": self.rms_norm_eps, "hidden_act": self.hidden_act,
               "attention_bias": self.attention_bias, "max_position_embeddings": self.max_position_embeddings,
               "rope_parameters": self.rope or {"rope_type": "default", "rope_theta": 10000.0}}
        out["rope_theta"] = out["rope_parameters"].get("rope_theta", 10000.0)  # loaders that read the legacy field
        if self.greedy_temperature != 1.0:
            out["specdec_greedy_temperature"] = self.greedy_temperature
        if self.kind == "eagle3":
            out.update(draft_vocab_size=self.draft_vocab_size, target_hidden_size=self.target_hidden_size,
                       eagle_aux_hidden_state_layer_ids=list(self.aux_layers),
                       norm_before_residual=self.norm_before_residual)
        else:
            out["bias"] = self.fc_bias
        return out


def check_config(c: EagleConfig, target: PreTrainedModel) -> None:
    """The head fits the target: vocabulary, width, feature layers (ValueError naming the field)."""
    tc = target.config.get_text_config()
    if c.vocab_size != vocab_size(target):
        raise ValueError(f"vocab_size: the head's vocabulary has {c.vocab_size} tokens, the target's "
                         f"{vocab_size(target)}")
    if c.target_hidden_size != tc.hidden_size:
        raise ValueError(f"target_hidden_size: the head reads {c.target_hidden_size}-wide hidden states, the target's "
                         f"are {tc.hidden_size} wide")
    L = tc.num_hidden_layers
    last = L - 1 if c.kind == "eagle3" else L  # EAGLE-3 reads pre-norm states only; index L is post-norm
    bad = [i for i in c.aux_layers if isinstance(i, bool) or not isinstance(i, int) or not 0 <= i <= last]
    if bad or not c.aux_layers:
        raise ValueError(f"eagle_aux_hidden_state_layer_ids: {list(c.aux_layers)} must be indices in 0..{last} of the "
                         f"target's hidden states ({L} layers)")
    if c.kind not in KINDS:
        raise ValueError(f"kind: expected one of {KINDS}, got {c.kind!r}")


def read_checkpoint(path: Path, target: PreTrainedModel) -> tuple[EagleConfig, dict[str, Tensor]]:
    """The head's config and tensors (CPU, as stored), every name and shape checked."""
    if not path.is_dir():
        raise ValueError(f"path: {path} is not a directory holding an EAGLE head (config.json and *.safetensors)")
    if not (path / "config.json").is_file():
        raise ValueError(f"config.json: missing in {path}")
    raw = read_json(path / "config.json", "config.json")
    tensors = _read_tensors(path)
    kind = _kind(tensors)
    config = parse_config(raw, kind, target, tensors)
    check_config(config, target)
    expected = expected_tensors(config)
    if "embed_tokens.weight" in tensors:
        expected["embed_tokens.weight"] = (config.vocab_size, config.hidden_size)
    elif config.hidden_size != config.target_hidden_size:
        raise ValueError(f"embed_tokens.weight: missing; a head {config.hidden_size} wide cannot use the target's "
                         f"{config.target_hidden_size}-wide embeddings")
    for name, shape in expected.items():
        if name not in tensors:
            raise ValueError(f"{name}: missing from the {kind} checkpoint in {path}")
        if tuple(tensors[name].shape) != shape:
            raise ValueError(f"{name}: shape {list(tensors[name].shape)}, expected {list(shape)} from config.json")
    extra = sorted(set(tensors) - set(expected))
    if extra:
        raise ValueError(f"{extra[0]}: unexpected tensor in the {kind} layout" + (f" (and {len(extra) - 1} more)"
                                                                                  if len(extra) > 1 else ""))
    for name, t in tensors.items():
        if name not in ("d2t", "t2d") and not t.is_floating_point():
            raise ValueError(f"{name}: expected a floating-point tensor, got {t.dtype}")
    if kind == "eagle3":
        _check_vocab_map(tensors, config)
    return config, tensors


def _read_tensors(path: Path) -> dict[str, Tensor]:
    files = sorted(path.glob("*.safetensors"))
    if not files:
        pickled = sorted(p.name for p in path.iterdir() if p.suffix in (".bin", ".pt", ".pth", ".ckpt"))
        if pickled:
            raise ValueError(f"{pickled[0]}: a pickled checkpoint, which specdec does not load; "
                             + _CONVERT.replace("{name}", str(path / pickled[0])))
        raise ValueError(f"model.safetensors: no *.safetensors file in {path}")
    tensors: dict[str, Tensor] = {}
    for f in files:
        try:
            with safe_open(str(f), framework="pt") as handle:
                for name in handle.keys():
                    tensors[name] = handle.get_tensor(name)
        except Exception as err:  # safetensors raises its own error types for damaged files
            raise ValueError(f"{f.name}: not a readable safetensors file ({err})") from None
    return tensors


def _kind(tensors: dict[str, Tensor]) -> str:
    eagle3 = "midlayer.self_attn.q_proj.weight" in tensors
    eagle1 = "layers.0.self_attn.q_proj.weight" in tensors
    if eagle3 == eagle1:
        names = ", ".join(sorted(tensors)[:4]) or "none"
        raise ValueError("architecture: unknown EAGLE layout, expected midlayer.* (EAGLE-3) or layers.0.* (EAGLE-1/2) "
                         f"tensors, found {names}{', ...' if len(tensors) > 4 else ''}")
    return "eagle3" if eagle3 else "eagle1"


def _field(raw: dict, name: str, kind: type, default=None):
    value = raw.get(name, default)
    if value is None:
        raise ValueError(f"config.json: field {name!r} is missing")
    ok = isinstance(value, kind) and not (kind is int and isinstance(value, bool))
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        value, ok = float(value), True
    if not ok:
        raise ValueError(f"config.json: field {name!r} is {value!r}, expected {kind.__name__}")
    if kind is int and value < 1:
        raise ValueError(f"config.json: field {name!r} is {value}, expected a positive int")
    return value


def parse_config(raw: dict, kind: str, target: PreTrainedModel, tensors: dict[str, Tensor]) -> EagleConfig:
    """EagleConfig from a config.json object (field names of the published heads)."""
    H = _field(raw, "hidden_size", int)
    heads = _field(raw, "num_attention_heads", int)
    kv = _field(raw, "num_key_value_heads", int, heads)
    head_dim = _field(raw, "head_dim", int, H // heads if H % heads == 0 else None)
    if heads % kv:
        raise ValueError(f"config.json: num_attention_heads {heads} is not a multiple of num_key_value_heads {kv}")
    vocab = _field(raw, "vocab_size", int)
    rope = raw.get("rope_parameters")
    if rope is None:
        scaling = raw.get("rope_scaling") or {}
        if not isinstance(scaling, dict):
            raise ValueError(f"config.json: field 'rope_scaling' is {scaling!r}, expected an object or null")
        rope = {"rope_type": scaling.get("rope_type", scaling.get("type", "default")), **scaling,
                "rope_theta": _field(raw, "rope_theta", float, 10000.0)}
    elif not isinstance(rope, dict):
        raise ValueError(f"config.json: field 'rope_parameters' is {rope!r}, expected an object")
    common = dict(kind=kind, hidden_size=H, num_heads=heads, num_kv_heads=kv, head_dim=head_dim,
                  intermediate_size=_field(raw, "intermediate_size", int), vocab_size=vocab,
                  rms_norm_eps=_field(raw, "rms_norm_eps", float, 1e-6),
                  hidden_act=_field(raw, "hidden_act", str, "silu"),
                  attention_bias=_field(raw, "attention_bias", bool, False),
                  max_position_embeddings=_field(raw, "max_position_embeddings", int, 2048), rope=rope,
                  greedy_temperature=_field(raw, "specdec_greedy_temperature", float, 1.0))
    if not common["greedy_temperature"] > 0:
        raise ValueError(f"config.json: field 'specdec_greedy_temperature' is {common['greedy_temperature']}, "
                         "expected a number > 0")
    L = target.config.get_text_config().num_hidden_layers
    if kind == "eagle1":
        bias = "fc.bias" in tensors
        if raw.get("bias") is not None and raw.get("bias") is not bias:
            has = "has" if bias else "lacks"
            raise ValueError(f"fc.bias: config.json says bias={raw['bias']}, the checkpoint {has} it")
        return EagleConfig(**common, draft_vocab_size=vocab, target_hidden_size=H, aux_layers=(L,), fc_bias=bias)
    nested = raw.get("eagle_config") if isinstance(raw.get("eagle_config"), dict) else {}
    ids = nested.get("eagle_aux_hidden_state_layer_ids", raw.get("eagle_aux_hidden_state_layer_ids"))
    if ids is None:
        ids = default_aux_layers(L)
    if not isinstance(ids, (list, tuple)) or not all(isinstance(i, int) and not isinstance(i, bool) for i in ids):
        raise ValueError(f"config.json: field 'eagle_aux_hidden_state_layer_ids' is {ids!r}, expected a list of ints")
    return EagleConfig(**common, draft_vocab_size=_field(raw, "draft_vocab_size", int, vocab),
                       target_hidden_size=_field(raw, "target_hidden_size", int, H), aux_layers=tuple(ids),
                       fc_bias="fc.bias" in tensors,
                       norm_before_residual=_field(raw, "norm_before_residual", bool, False))


def expected_tensors(c: EagleConfig) -> dict[str, tuple[int, ...]]:
    """Every tensor name of the head's layout and its shape."""
    H, q, kv = c.hidden_size, c.num_heads * c.head_dim, c.num_kv_heads * c.head_dim
    width = 2 * H if c.kind == "eagle3" else H
    prefix = "midlayer." if c.kind == "eagle3" else "layers.0."
    layer = {"self_attn.q_proj.weight": (q, width), "self_attn.k_proj.weight": (kv, width),
             "self_attn.v_proj.weight": (kv, width), "self_attn.o_proj.weight": (H, q),
             "mlp.gate_proj.weight": (c.intermediate_size, H), "mlp.up_proj.weight": (c.intermediate_size, H),
             "mlp.down_proj.weight": (H, c.intermediate_size), "post_attention_layernorm.weight": (H,)}
    if c.attention_bias:
        layer.update({"self_attn.q_proj.bias": (q,), "self_attn.k_proj.bias": (kv,), "self_attn.v_proj.bias": (kv,),
                      "self_attn.o_proj.bias": (H,)})
    if c.kind == "eagle3":
        layer.update({"input_layernorm.weight": (H,), "hidden_norm.weight": (H,)})
    out = {prefix + k: v for k, v in layer.items()}
    fc_in = len(c.aux_layers) * c.target_hidden_size if c.kind == "eagle3" else 2 * H
    out["fc.weight"] = (H, fc_in)
    if c.fc_bias:
        out["fc.bias"] = (H,)
    if c.kind == "eagle3":
        out.update({"norm.weight": (H,), "lm_head.weight": (c.draft_vocab_size, H), "d2t": (c.draft_vocab_size,),
                    "t2d": (c.vocab_size,)})
    return out


def _check_vocab_map(tensors: dict[str, Tensor], c: EagleConfig) -> None:
    """d2t: integer offsets mapping every draft id into the target's vocabulary, injectively; t2d: bool."""
    d2t, t2d = tensors["d2t"], tensors["t2d"]
    if d2t.dtype not in (torch.int64, torch.int32):
        raise ValueError(f"d2t: expected int64 offsets, got {d2t.dtype}")
    if t2d.dtype != torch.bool:
        raise ValueError(f"t2d: expected bool, got {t2d.dtype}")
    ids = torch.arange(c.draft_vocab_size) + d2t.to(torch.int64)
    if bool(((ids < 0) | (ids >= c.vocab_size)).any()):
        raise ValueError(f"d2t: maps draft ids outside the target's vocabulary [0, {c.vocab_size})")
    if ids.unique().numel() != ids.numel():
        raise ValueError("d2t: maps two draft ids to the same target id")
    tensors["d2t"] = d2t.to(torch.int64)
