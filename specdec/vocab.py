"""Draft and scorer models whose embedding matrices differ in size from the target's.

One tokenizer, different padding: model families round their embedding rows up differently (Qwen2.5-0.5B,
1.5B and 3B have 151,936 rows, Qwen2.5-7B and larger 152,064, for a 151,665-token tokenizer), so the
canonical pair "0.5B drafts for 7B" has different vocabulary sizes and the same token ids. Whether two
models share a tokenizer is decided by their tokenizers (the CLI compares vocabulary hashes); given that,
the rule here is:

* the shared id range is [0, min(V_model, V_target)): only there do both models have a row;
* the draft's (or scorer's) distribution is restricted to it: rows beyond it are never proposed, and a
  draft's logits are brought to the target's width with -inf past the shared range, so a sampled q is
  zero there (the recursive rejection rule then compares p and q over the target's ids);
* ids the model cannot embed (target ids >= V_model, only possible when the model is the smaller one)
  are fed to it as id 0: its view of the context is wrong after such a token, so only its proposals
  suffer, never the output, which the target verifies;
* a scorer gives such ids log-probability -inf (its distribution has no mass there).

transformers' assisted generation treats such a pair as two tokenizers (``assistant_tokenizer``) and maps
ids through the vocabularies' strings, filling the target-sized logits with -inf where the assistant has
no token; with one tokenizer that map is the identity on the shared range, which is what this does
without re-tokenising.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor
from transformers import PreTrainedModel

from .verify import vocab_size

__all__ = ["SharedVocab"]


@dataclass(frozen=True)
class SharedVocab:
    """The ids a draft or scorer model (`model` rows) shares with its target (`target` rows): [0, size)."""

    model: int
    target: int

    @classmethod
    def between(cls, model: PreTrainedModel, target: PreTrainedModel) -> "SharedVocab":
        return cls(vocab_size(model), vocab_size(target))

    @property
    def size(self) -> int:
        return min(self.model, self.target)

    def logits(self, logits: Tensor) -> Tensor:
        """[..., V_model] -> [..., V_target]: the model's logits over the target's ids, -inf past the shared
        range (a view when the model is the larger one)."""
        if self.model >= self.target:
            return logits if self.model == self.target else logits[..., : self.target]
        pad = logits.new_full((*logits.shape[:-1], self.target - self.model), float("-inf"))
        return torch.cat([logits, pad], -1)

    def ids(self, tokens: Tensor) -> Tensor:
        """`tokens` with the ids the model cannot embed (>= V_model) replaced by 0."""
        return tokens if self.model >= self.target else torch.where(tokens < self.model, tokens, 0)

    def known(self, tokens: Tensor) -> Tensor:
        """bool, like `tokens`: the ids in the shared range (a scorer's log-prob of the others is -inf)."""
        return tokens < self.size
