"""Inputs of the kernel tests (tests/ops/) and their checks: attention, top-k expansion, log-prob and path-mean
cases made on the GPU when there is one, else on the CPU (Triton under its interpreter)."""

from __future__ import annotations

import math

import torch

from specdec.ops import Expansion, token_logprob_ref

DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")


def attention_inputs(B: int, Hq: int, Hkv: int, T: int, D: int, prefix: int, dtype: torch.dtype, seed: int):
    """q [B, Hq, T, D], k/v [B, Hkv, S, D] and ragged start/length [B]: row b's prefix shrinks with b."""
    gen = torch.Generator().manual_seed(seed)
    length = torch.tensor([max(prefix - 3 * b, 0) for b in range(B)])
    start = torch.minimum(torch.tensor([0, 2, 5, 1][:B] + [0] * max(B - 4, 0)), length)
    S = prefix + T + 5
    q, k, v = (torch.randn(shape, generator=gen).to(DEVICE, dtype) for shape in
               ((B, Hq, T, D), (B, Hkv, S, D), (B, Hkv, S, D)))
    return q, k, v, start.to(DEVICE), length.to(DEVICE)


def expand_case(B: int, F: int, V: int, *, seed: int = 0, scale: float = 3.0, dtype=torch.float32,
         inactive: float = 0.25) -> dict:
    """Random draft logits and tree stats; about `inactive` of the frontier slots are -inf (never all of a row)."""
    gen = torch.Generator().manual_seed(seed)
    logits = (scale * torch.randn(B, F, V, generator=gen)).to(dtype)
    flogp = -2.0 * torch.rand(B, F, generator=gen)
    off = torch.rand(B, F, generator=gen) < inactive
    off[:, 0] = False
    flogp[off] = -math.inf
    tree_size = torch.randint(1, 6, (B,), generator=gen)
    return dict(logits=logits.to(DEVICE), frontier_logp=flogp.to(DEVICE), tree_size=tree_size.to(DEVICE),
                expected_len=(1.0 + torch.rand(B, generator=gen)).to(DEVICE),
                num_paths=torch.randint(1, 4, (B,), generator=gen).to(DEVICE),
                cost=torch.tensor([1.0, 0.05, 0.02, 0.05, 1.2], device=DEVICE))


def assert_same_expansion(a: Expansion, b: Expansion, *, atol: float, rtol: float) -> None:
    for name in ("tokens", "parent_slot", "keep", "tree_size"):
        assert torch.equal(getattr(a, name), getattr(b, name)), name
    torch.testing.assert_close(a.logp, b.logp, atol=atol, rtol=rtol)
    torch.testing.assert_close(a.expected_len, b.expected_len, atol=atol, rtol=rtol)


def logprob_inputs(N: int, V: int, d: int, *, dtype, bias: bool, seed: int = 0):
    """hidden [N, d], weight [V, d], bias [V] | None, targets [N], with logits of a few units."""
    gen = torch.Generator().manual_seed(seed)
    hidden = torch.randn(N, d, generator=gen)
    weight = 3.0 * torch.randn(V, d, generator=gen) / math.sqrt(d)
    b = torch.randn(V, generator=gen) if bias else None
    targets = torch.randint(0, V, (N,), generator=gen)
    cast = lambda t: None if t is None else t.to(dtype).to(DEVICE)  # noqa: E731
    return cast(hidden), cast(weight), cast(b), targets.to(DEVICE)


def exact_logprob(hidden, weight, targets, bias=None):
    """The answer in fp64 from the same (rounded) inputs."""
    return token_logprob_ref(hidden.double(), weight.double(), targets, bias=None if bias is None else bias.double())


def path_mean_inputs(B: int, T: int, seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Ragged random trees in topological order: parents[i] uniform in [0, i); padding parents are junk."""
    gen = torch.Generator().manual_seed(seed)
    idx = torch.arange(T)
    parents = (torch.rand(B, T, generator=gen) * idx).long()
    parents[:, 0] = -1
    num_nodes = torch.randint(1, T + 1, (B,), generator=gen)
    num_nodes[0] = T
    parents = torch.where(idx < num_nodes[:, None], parents, 7 * T)  # junk beyond num_nodes
    logp = -torch.rand(B, T, generator=gen) * 3
    return logp, parents, num_nodes
