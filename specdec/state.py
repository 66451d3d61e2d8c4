"""The decoding state shared by the generation loop and the suppliers.

Device side: the current root of each row. Host side: every committed token (`history`) and the output
bookkeeping, updated from the acceptance the verifier brings back with the step's one host sync, so
EOS handling, budgets and host-side suppliers (prompt lookup) never touch the device.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from .sampling import GREEDY, Sampling
from .verify import Acceptance

__all__ = ["DecodeState"]


@dataclass
class DecodeState:
    """State of one `generate` call over B left-padded prompts of width P.

    input_ids: [B, P] int64 (device), the prompts; start: [B] int64 (device), left-pad count per row.
    root:      [B] int64 (device), the last committed token (node 0 of the next tree).
    history:   [B, P + capacity] int64 (host): prompt columns, then every committed token; row b's
               tokens are ``history[b, host_start[b]:history_len[b]]`` and the root is the last of them.
    new_tokens: [B, max_new_tokens] int64 (host): the tokens emitted so far, pad after EOS.
    num_new, finished: [B] (host).
    capacity:  slots the target cache was sized for; suppliers size their own caches from it.
    sampling, generator: the call's sampling (greedy by default) and its torch.Generator (or None);
               suppliers that sample their candidates draw from the same generator as the verifier.
    """

    input_ids: Tensor
    start: Tensor
    root: Tensor
    history: np.ndarray
    history_len: np.ndarray
    host_start: np.ndarray
    new_tokens: np.ndarray
    num_new: np.ndarray
    finished: np.ndarray
    eos_token_ids: np.ndarray
    max_new_tokens: int
    capacity: int
    sampling: Sampling = GREEDY
    generator: torch.Generator | None = None

    @classmethod
    def begin(cls, input_ids: Tensor, start: Tensor, *, max_new_tokens: int, capacity: int,
              eos_token_ids: list[int], pad_token_id: int, sampling: Sampling = GREEDY,
              generator: torch.Generator | None = None) -> "DecodeState":
        B, P = input_ids.shape
        host_ids = input_ids.cpu().numpy()
        history = np.full((B, P + capacity), pad_token_id, dtype=np.int64)
        history[:, :P] = host_ids
        return cls(
            input_ids=input_ids,
            start=start,
            root=input_ids[:, -1].clone(),
            history=history,
            history_len=np.full(B, P, dtype=np.int64),
            host_start=start.cpu().numpy().astype(np.int64),
            new_tokens=np.full((B, max_new_tokens), pad_token_id, dtype=np.int64),
            num_new=np.zeros(B, dtype=np.int64),
            finished=np.zeros(B, dtype=bool),
            eos_token_ids=np.asarray(eos_token_ids, dtype=np.int64),
            max_new_tokens=max_new_tokens,
            capacity=capacity,
            sampling=sampling,
            generator=generator,
        )

    @property
    def batch_size(self) -> int:
        return self.input_ids.shape[0]

    @property
    def done(self) -> bool:
        return bool(self.finished.all())

    def append(self, acc: Acceptance) -> np.ndarray:
        """Record a step's acceptance; returns how many tokens each row emitted (0 for finished rows)."""
        tokens, n = acc.host_tokens, acc.host_num_accepted + 1  # [B, A], [B]
        cols = np.arange(tokens.shape[1])[None, :]
        rows, js = np.nonzero(cols < n[:, None])
        self.history[rows, self.history_len[rows] + js] = tokens[rows, js]
        self.history_len += n
        eos = np.isin(tokens, self.eos_token_ids) & (cols < n[:, None])
        first_eos = np.where(eos.any(1), eos.argmax(1), tokens.shape[1])
        keep = np.minimum(np.minimum(n, first_eos + 1), self.max_new_tokens - self.num_new)
        keep = np.where(self.finished, 0, keep)
        rows, js = np.nonzero(cols < keep[:, None])
        self.new_tokens[rows, self.num_new[rows] + js] = tokens[rows, js]
        self.finished |= (first_eos < keep) | (self.num_new + keep >= self.max_new_tokens)
        self.num_new += keep
        self.root = acc.tokens.gather(1, acc.num_accepted[:, None])[:, 0]
        return keep

    def sequences(self) -> Tensor:
        """[B, P + L] int64 on the prompts' device, L = the longest row's output: `generate`'s layout."""
        out = torch.from_numpy(self.new_tokens[:, : int(self.num_new.max())].copy()).to(self.input_ids.device)
        return torch.cat([self.input_ids, out], dim=1)

    def active(self) -> Tensor:
        """[B] bool (device): rows still generating."""
        return torch.from_numpy(~self.finished).to(self.input_ids.device)
