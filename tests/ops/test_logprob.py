"""K3 token_logprob / token_logprob_from_logits / path_mean: references by hand, Triton against them."""

from __future__ import annotations

import math

import pytest
import torch

from specdec.ops import (path_mean, path_mean_ref, token_logprob, token_logprob_from_logits,
                         token_logprob_from_logits_ref, token_logprob_ref)
from specdec.ops._backend import triton_runnable
from tests.kernel_inputs import exact_logprob, logprob_inputs, path_mean_inputs

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
needs_triton = pytest.mark.skipif(not triton_runnable(torch.device(DEVICE)),
                                  reason="triton cannot run here (no CUDA device and no TRITON_INTERPRET=1)")
# Triton vs the fp64 answer: fp16 products are exact in fp32, so both dtypes only see fp32 summation error.
TOLERANCES = [(torch.float32, 1e-5, 1e-5), (torch.float16, 1e-5, 1e-5)]


# --------------------------------------------------------------------------- token_logprob

def test_ref_by_hand():
    # logits [0, 1] -> log softmax at 1 = 1 - log(1 + e)
    out = token_logprob_ref(torch.tensor([[1.0]]), torch.tensor([[0.0], [1.0]]), torch.tensor([1]))
    torch.testing.assert_close(out, torch.tensor([1.0 - math.log1p(math.e)]))
    with_bias = token_logprob_ref(torch.tensor([[1.0]]), torch.tensor([[0.0], [1.0]]), torch.tensor([0]),
                                  bias=torch.tensor([1.0, 0.0]))  # logits [1, 1]
    torch.testing.assert_close(with_bias, torch.tensor([-math.log(2.0)]))
    torch.testing.assert_close(token_logprob_from_logits_ref(torch.tensor([[0.0, 1.0]]), torch.tensor([1])),
                               torch.tensor([1.0 - math.log1p(math.e)]))


@needs_triton
@pytest.mark.parametrize("dtype, atol, rtol", TOLERANCES)
@pytest.mark.parametrize("N, V, d", [(1, 97, 16), (5, 130, 40), (33, 97, 40), (5, 1000, 16), (33, 1000, 40),
                                     (1, 130, 40)])
@pytest.mark.parametrize("bias", [False, True])
def test_triton_matches_exact(dtype, atol, rtol, N, V, d, bias):
    hidden, weight, b, targets = logprob_inputs(N, V, d, dtype=dtype, bias=bias, seed=N + V + d)
    out = token_logprob(hidden, weight, targets, bias=b, backend="triton")
    assert out.dtype == torch.float32 and out.shape == (N,)
    torch.testing.assert_close(out.double(), exact_logprob(hidden, weight, targets, b), atol=atol, rtol=rtol)


@needs_triton
def test_triton_fp16_no_worse_than_torch():
    # docs/architecture.md: against fp64, no worse than twice torch's own error in fp16 (torch rounds the logits to fp16).
    hidden, weight, b, targets = logprob_inputs(33, 1000, 40, dtype=torch.float16, bias=True, seed=4)
    truth = exact_logprob(hidden, weight, targets, b)
    ours = (token_logprob(hidden, weight, targets, bias=b, backend="triton").double() - truth).abs().max()
    theirs = (token_logprob_ref(hidden, weight, targets, bias=b).double() - truth).abs().max()
    assert ours <= 2 * theirs


@needs_triton
def test_triton_strided_inputs_and_determinism():
    hidden, weight, _, targets = logprob_inputs(5, 130, 40, dtype=torch.float32, bias=False)
    wide = torch.zeros(5, 80, device=DEVICE)
    wide[:, ::2] = hidden
    weight_t = weight.t().contiguous().t()  # column-major LM head, as a transposed embedding would be
    columns = torch.stack([targets, targets.flip(0)], 1).to(torch.int32)  # targets as a strided column
    out = token_logprob(wide[:, ::2], weight_t, columns[:, 0], backend="triton")
    torch.testing.assert_close(out.double(), exact_logprob(hidden, weight, targets), atol=1e-5, rtol=1e-5)
    assert torch.equal(out, token_logprob(wide[:, ::2], weight_t, targets, backend="triton"))


@needs_triton
@pytest.mark.parametrize("dtype, atol, rtol", TOLERANCES)
@pytest.mark.parametrize("N, V", [(1, 97), (5, 1000), (33, 130)])
def test_triton_from_logits(dtype, atol, rtol, N, V):
    gen = torch.Generator().manual_seed(N * V)
    logits = (4.0 * torch.randn(V, N, generator=gen)).to(dtype).to(DEVICE).t()  # non-contiguous [N, V]
    targets = torch.randint(0, V, (N,), generator=gen).to(DEVICE)
    out = token_logprob_from_logits(logits, torch.stack([targets, targets], 1)[:, 1], backend="triton")  # strided
    torch.testing.assert_close(out.double(), token_logprob_from_logits_ref(logits.double(), targets),
                               atol=atol, rtol=rtol)


@needs_triton
def test_triton_from_logits_masked_vocabulary():
    # -inf logits (banned tokens) must not poison the running log-sum-exp, even a whole -inf tile.
    logits = torch.randn(3, 200)
    logits[:, :70] = float("-inf")
    logits[1, 150:] = float("-inf")
    targets = torch.tensor([100, 70, 199])
    out = token_logprob_from_logits(logits.to(DEVICE), targets.to(DEVICE), backend="triton")
    torch.testing.assert_close(out.cpu(), token_logprob_from_logits_ref(logits, targets), atol=1e-6, rtol=1e-6)


def test_empty_batch():
    hidden, weight, _, _ = logprob_inputs(1, 97, 16, dtype=torch.float32, bias=False)
    empty = torch.zeros(0, dtype=torch.int64, device=DEVICE)
    backend = "triton" if triton_runnable(torch.device(DEVICE)) else "torch"
    assert token_logprob(hidden[:0], weight, empty, backend=backend).shape == (0,)


# --------------------------------------------------------------------------- path_mean

def test_path_mean_ref_by_hand():
    # root 0 -> {1, 2}, 1 -> 3; node 4 is padding.
    out = path_mean_ref(torch.tensor([[5.0, -1.0, -2.0, -3.0, -9.0]]), torch.tensor([[-1, 0, 0, 1, 3]]),
                        torch.tensor([4]))
    assert out.tolist() == [[0.0, -1.0, -2.0, -2.0, 0.0]]


@pytest.mark.parametrize("T", [1, 7, 33, 130])
def test_path_mean_ref_chain_and_star(T):
    logp = -torch.rand(1, T)
    idx = torch.arange(T)
    chain = path_mean_ref(logp, (idx - 1)[None], torch.tensor([T]))
    depth = idx.clamp(min=1).float()
    expected = torch.where(idx > 0, torch.cat([torch.zeros(1), logp[0, 1:].cumsum(0)]) / depth, 0.0)
    torch.testing.assert_close(chain[0], expected)
    star = path_mean_ref(logp, torch.where(idx > 0, 0, -1)[None], torch.tensor([T]))
    torch.testing.assert_close(star[0], torch.where(idx > 0, logp[0], 0.0))


@needs_triton
@pytest.mark.parametrize("T", [1, 7, 33, 130])
def test_path_mean_triton(T):
    logp, parents, num_nodes = path_mean_inputs(4, T, seed=T)
    logp = logp.to(DEVICE)
    out = path_mean(logp, parents.to(DEVICE), num_nodes.to(DEVICE), backend="triton")
    ref = path_mean_ref(logp, parents.to(DEVICE), num_nodes.to(DEVICE))
    torch.testing.assert_close(out, ref, atol=1e-6, rtol=1e-6)
    padding = torch.arange(T, device=DEVICE) >= num_nodes.to(DEVICE)[:, None]
    assert (out[padding] == 0).all() and (out[:, 0] == 0).all()
    chain_parents = (torch.arange(T, device=DEVICE) - 1)[None].expand(2, T).to(torch.int32)
    strided_nodes = torch.tensor([[T, T], [1, T]], device=DEVICE)[:, 0]  # num_nodes [T, 1] as a strided view
    chain = path_mean(logp[:2].t().contiguous().t(), chain_parents, strided_nodes, backend="triton")
    torch.testing.assert_close(chain, path_mean_ref(logp[:2], chain_parents, torch.tensor([T, 1], device=DEVICE)))
    star_parents = torch.where(torch.arange(T, device=DEVICE) > 0, 0, -1)[None]
    star = path_mean(logp[:1], star_parents, torch.tensor([T], device=DEVICE), backend="triton")
    assert torch.equal(star[0, 1:], logp[0, 1:])


@pytest.mark.parametrize("call, match", [
    (lambda: path_mean(torch.zeros(2, 3), torch.tensor([[-1, 0, 1]] * 2), torch.tensor([3, 4]), validate=True),
     "num_nodes: row 1 has 4 nodes"),
    (lambda: path_mean(torch.zeros(1, 3), torch.tensor([[-1, 0, 2]]), torch.tensor([3]), validate=True),
     "parents: row 0 node 2 has parent 2"),
    (lambda: path_mean(torch.zeros(1, 3), torch.tensor([[-1, 0]]), torch.tensor([3])), r"parents: expected \[1, 3\]"),
    (lambda: path_mean(torch.zeros(1, 3), torch.tensor([[-1, 0, 1]]), torch.tensor([3.0])), "num_nodes: expected int"),
    (lambda: path_mean(torch.zeros(1, 3, dtype=torch.float16), torch.tensor([[-1, 0, 1]]), torch.tensor([3])),
     "logp: expected float32"),
    (lambda: token_logprob(torch.zeros(2, 4), torch.zeros(5, 3), torch.zeros(2, dtype=torch.int64)),
     r"hidden, weight: expected \[N, d\]"),
    (lambda: token_logprob(torch.zeros(2, 4), torch.zeros(5, 4).half(), torch.zeros(2, dtype=torch.int64)),
     "hidden, weight: expected one dtype"),
    (lambda: token_logprob(torch.zeros(2, 4), torch.zeros(5, 4), torch.zeros(3, dtype=torch.int64)),
     r"targets: expected \[2\]"),
    (lambda: token_logprob(torch.zeros(2, 4), torch.zeros(5, 4), torch.zeros(2)), "targets: expected int32/int64"),
    (lambda: token_logprob(torch.zeros(2, 4), torch.zeros(5, 4), torch.tensor([0, 5]), validate=True),
     r"targets: entry 1 holds id 5, outside the vocabulary \[0, 5\)"),
    (lambda: token_logprob(torch.zeros(2, 4), torch.zeros(5, 4), torch.tensor([0, 1]), bias=torch.zeros(4)),
     r"bias: expected \[5\]"),
    (lambda: token_logprob(torch.zeros(2, 4), torch.zeros(5, 4), torch.tensor([0, 1]), backend="magic"),
     "backend: 'magic'"),
    (lambda: token_logprob_from_logits(torch.zeros(2, 5), torch.tensor([0, -1]), validate=True),
     "targets: entry 1 holds id -1"),
    (lambda: token_logprob_from_logits(torch.zeros(2, 5, dtype=torch.int32), torch.tensor([0, 1])),
     "logits: expected fp16/bf16/fp32"),
])
def test_bad_arguments(call, match):
    with pytest.raises((ValueError, TypeError), match=match):
        call()


# --------------------------------------------------------------------------- real sizes on a GPU

@pytest.mark.gpu
@pytest.mark.parametrize("V", [32000, 152064])
def test_gpu_bf16_no_worse_than_torch(V):
    hidden, weight, _, targets = logprob_inputs(1024, V, 896, dtype=torch.bfloat16, bias=False, seed=V)
    truth = exact_logprob(hidden, weight, targets)
    ours = (token_logprob(hidden, weight, targets, backend="triton").double() - truth).abs().max()
    theirs = (token_logprob_ref(hidden, weight, targets).double() - truth).abs().max()
    assert ours <= 2 * theirs, (ours, theirs)


@pytest.mark.gpu
def test_gpu_from_logits_and_path_mean():
    gen = torch.Generator().manual_seed(0)
    logits = (4.0 * torch.randn(1024, 152064, generator=gen)).to(torch.bfloat16).cuda()
    targets = torch.randint(0, 152064, (1024,), generator=gen).cuda()
    out = token_logprob_from_logits(logits, targets, backend="triton")
    torch.testing.assert_close(out.double(), token_logprob_from_logits_ref(logits.double(), targets),
                               atol=1e-4, rtol=1e-5)
    logp, parents, num_nodes = path_mean_inputs(32, 256, seed=1)
    args = (logp.cuda(), parents.cuda(), num_nodes.cuda())
    torch.testing.assert_close(path_mean(*args, backend="triton"), path_mean_ref(*args), atol=1e-5, rtol=1e-5)
