"""Tiny random-weight models of each supported architecture, built offline from configs."""

from __future__ import annotations

import copy
import os
import random

import torch

# Without a GPU, Triton kernels run on the CPU under the interpreter, which must be switched on before
# triton is first imported (plain `import torch` does not import it).
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest
from transformers import (LlamaConfig, LlamaForCausalLM, MistralConfig, MistralForCausalLM, Qwen2Config,
                          Qwen2ForCausalLM, Qwen3Config, Qwen3ForCausalLM)

import specdec

VOCAB = 96
_COMMON = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
               num_key_value_heads=2, max_position_embeddings=256, pad_token_id=0, bos_token_id=1, eos_token_id=2,
               tie_word_embeddings=False)
ARCHS = {
    "llama": (LlamaConfig, LlamaForCausalLM, {}),
    "qwen2": (Qwen2Config, Qwen2ForCausalLM, {}),
    "qwen3": (Qwen3Config, Qwen3ForCausalLM, {"head_dim": 16}),
    "mistral": (MistralConfig, MistralForCausalLM, {"sliding_window": None, "num_key_value_heads": 1}),
}


def make_model(arch: str, seed: int = 0, **overrides) -> torch.nn.Module:
    config_cls, model_cls, extra = ARCHS[arch]
    torch.manual_seed(seed)
    config = config_cls(**{**_COMMON, **extra, **overrides})
    model = model_cls(config).eval()
    # Random init gives near-uniform logits; sharpen them so greedy paths are not decided by rounding.
    with torch.no_grad():
        model.lm_head.weight.mul_(8.0)
    return model


def perturbed(model: torch.nn.Module, scale: float = 0.3, seed: int = 1) -> torch.nn.Module:
    """A copy whose weights carry relative noise: it agrees with `model` often, not always."""
    draft = copy.deepcopy(model)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in draft.parameters():
            p.add_(scale * p.std() * torch.randn(p.shape, generator=gen))
    return draft


@pytest.fixture(autouse=True)
def _no_grad():
    with torch.no_grad():
        yield


def ragged_prompts(lengths: list[int], seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Left-padded prompts with the given lengths (pad id 0); tokens avoid the special ids 0-2."""
    gen = torch.Generator().manual_seed(seed)
    P = max(lengths)
    ids = torch.zeros(len(lengths), P, dtype=torch.int64)
    mask = torch.zeros_like(ids)
    for b, n in enumerate(lengths):
        # repeat a short motif so prompt lookup finds matches
        motif = torch.randint(3, VOCAB, (max(2, n // 3),), generator=gen)
        ids[b, P - n:] = motif.repeat(n // len(motif) + 1)[:n]
        mask[b, P - n:] = 1
    return ids, mask


def make_tree(kind: str, B: int, T: int, seed: int, device: torch.device | str = "cpu"):
    """A chain, a star or a random tree per row; rows after the first are ragged (padding nodes)."""
    from specdec.tree import TreeBatch

    rng = random.Random(seed)
    if kind == "chain":
        parents = [[-1] + list(range(T - 1))] * B
    elif kind == "star":
        parents = [[-1] + [0] * (T - 1)] * B
    else:
        parents = [[-1] + [rng.randrange(i) for i in range(1, T)] for _ in range(B)]
    num_nodes = [T] + [rng.randint(1, T) for _ in range(B - 1)]
    return TreeBatch.from_parents([list(range(T))] * B, parents, num_nodes, device=device)


def assert_gpu_generation_identity(backend: str, mode: str) -> None:
    """On CUDA, fp32, a ragged batch: `backend` == "torch" == model.generate(do_sample=False), token for token."""
    target = make_model("llama").cuda()
    draft = perturbed(target)
    ids, mask = (t.cuda() for t in ragged_prompts([5, 11, 8]))
    ref = target.generate(ids, attention_mask=mask, max_new_tokens=24, do_sample=False, pad_token_id=0)
    outs = {}
    for name in (backend, "torch"):
        supplier = specdec.DraftSupplier(draft, mode=mode, depth=4, topk=3, total_tokens=10, backend=name)
        gen = specdec.SpeculativeGenerator(target, supplier, backend=name)
        outs[name] = gen.generate(ids, attention_mask=mask, max_new_tokens=24, pad_token_id=0,
                                  eos_token_id=[]).sequences
    assert torch.equal(outs[backend], outs["torch"])
    assert torch.equal(outs[backend], ref)
