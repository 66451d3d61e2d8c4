"""A custom supplier: copy what followed the last earlier occurrence of the root token.

For each row, find the most recent earlier position of the current root token in the row's context
(prompt and output so far) and propose the `depth` tokens that followed it there, as a chain. No model
runs: the supplier reads the committed tokens the decoding state keeps on the host, so it adds no device
sync. Greedy verification keeps the output identical to ``model.generate(do_sample=False)`` whatever the
supplier proposes; only the speed depends on how often its guesses are right.

Run it (a tiny random-weight Llama built from a config, no download):

    python docs/examples/custom_supplier.py

It is shown and explained in docs/extending.md and run by tests/package/test_docs.py.
"""

from __future__ import annotations

import numpy as np
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from specdec import DecodeState, SpeculativeGenerator, Supplier
from specdec.tree import TreeBatch


class RepeatSupplier(Supplier):
    """Proposes, per row, the `depth` tokens that followed the root token's last earlier occurrence."""

    def __init__(self, depth: int = 4):
        if isinstance(depth, bool) or not isinstance(depth, int) or depth < 1:
            raise ValueError(f"depth: expected an int >= 1, got {depth!r}")
        self.depth = depth

    def max_tree_size(self) -> int:
        return self.depth + 1  # nodes per row, root included: caches are sized from it before decoding

    def propose(self, state: DecodeState) -> TreeBatch:
        roots, paths = [], []
        for b in range(state.batch_size):
            row = state.history[b, state.host_start[b]:state.history_len[b]]  # committed tokens; row[-1] is the root
            earlier = np.flatnonzero(row[:-1] == row[-1])
            follow = row[earlier[-1] + 1:earlier[-1] + 1 + self.depth] if len(earlier) else row[:0]
            roots.append(int(row[-1]))
            paths.append([follow.tolist()] if len(follow) else [])  # no match: the root alone (a plain step)
        return TreeBatch.from_paths(roots, paths, device=state.root.device)


def tiny_llama(seed: int = 0) -> LlamaForCausalLM:
    """A random-weight Llama small enough for a CPU; sharpened logits so greedy ties do not occur."""
    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=96, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                         pad_token_id=0, bos_token_id=1, eos_token_id=2, tie_word_embeddings=False)
    model = LlamaForCausalLM(config).eval()
    with torch.no_grad():
        model.lm_head.weight.mul_(8.0)
    return model


def run(max_new_tokens: int = 32) -> tuple[torch.Tensor, torch.Tensor, float]:
    """Speculative output, `generate`'s greedy output and the mean accepted length, on two ragged prompts."""
    model = tiny_llama()
    motif = torch.tensor([5, 17, 42, 8, 23, 61])
    ids = torch.zeros(2, 12, dtype=torch.int64)
    mask = torch.zeros_like(ids)
    ids[0], mask[0] = motif.repeat(2), 1  # row 0: 12 tokens
    ids[1, 4:], mask[1, 4:] = motif[:4].repeat(2), 1  # row 1: 8 tokens, left-padded
    with torch.no_grad():
        out = SpeculativeGenerator(model, RepeatSupplier(depth=4)).generate(
            ids, attention_mask=mask, max_new_tokens=max_new_tokens)
        reference = model.generate(ids, attention_mask=mask, max_new_tokens=max_new_tokens, do_sample=False)
    return out.sequences, reference, out.stats.mean_accepted_length


if __name__ == "__main__":
    ours, reference, accepted = run()
    print("identical to generate(do_sample=False):", torch.equal(ours, reference))
    print(f"mean accepted length (bonus included): {accepted:.2f}")
