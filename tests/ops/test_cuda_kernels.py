"""The CUDA C++ kernels (csrc/, ``backend="cuda"``): dispatch and errors on any machine, the compile check
against a planted error where nvcc exists, and (``gpu``) parity with the torch reference and the Triton
kernels over the Triton tests' shape grids, plus the generation loop's output identity.

The GPU tests need the extension built (``SPECDEC_BUILD_CUDA=1 pip install --no-build-isolation -e .``);
tests/conftest.py skips them without a CUDA device or without the extension.
"""

from __future__ import annotations

import dataclasses
import math
import os
import shutil
import subprocess
import sys

import pytest
import torch

from specdec import ops
from specdec.ops import _backend, _cuda
from specdec.tree import pack_bits
from tests.gpu_identity import assert_gpu_generation_identity
from tests.helpers import ROOT, make_tree
from tests.kernel_inputs import (assert_same_expansion, attention_inputs, exact_logprob, expand_case, logprob_inputs,
                                 path_mean_inputs)

CUDA = torch.device("cuda")


# --------------------------------------------------------------------------- dispatch, on any machine

def _op_calls(backend: str) -> dict:
    """One small CPU call of each op with `backend`."""
    z = torch.zeros
    return {
        "tree_attention": lambda: ops.tree_attention(torch.randn(1, 2, 3, 8), torch.randn(1, 2, 6, 8), torch.randn(1, 2, 6, 8),
                                                     z(1, dtype=torch.int64), torch.full((1,), 3),
                                                     torch.ones(1, 3, 1, dtype=torch.int32), backend=backend),
        "smart_expand": lambda: ops.smart_expand(torch.randn(1, 2, 10), z(1, 2), torch.ones(1, dtype=torch.int64),
                                                 torch.ones(1), torch.ones(1), torch.tensor([1.0, 0.1, 0.0, 0.0, 1.0]),
                                                 k=2, alpha=0.8, budget=8, backend=backend),
        "token_logprob": lambda: ops.token_logprob(torch.randn(2, 4), torch.randn(5, 4), torch.tensor([0, 4]),
                                                   backend=backend),
        "token_logprob_from_logits": lambda: ops.token_logprob_from_logits(torch.randn(2, 5), torch.tensor([0, 4]),
                                                                           backend=backend),
        "path_mean": lambda: ops.path_mean(z(1, 3), torch.tensor([[-1, 0, 1]]), torch.tensor([3]), backend=backend),
    }


@pytest.mark.parametrize("op", sorted(_op_calls("cuda")))
def test_cuda_backend_on_cpu_tensors_raises(op):
    with pytest.raises(ValueError, match="backend: 'cuda' cannot run on cpu: the CUDA kernels need tensors on a CUDA"):
        _op_calls("cuda")[op]()


def test_resolution_prefers_triton_then_the_extension_on_cuda_tensors(monkeypatch):
    """auto: triton where it runs (it measured faster than the CUDA kernels on an H200), else cuda when the
    extension is built and the kernel takes the shapes and the card, else the fast torch path; an explicit cuda
    without the extension, or beyond the kernel's limits, is a ValueError that says why. Only device objects
    are involved: no GPU needed."""
    cpu = torch.device("cpu")
    monkeypatch.setattr(_backend, "cuda_extension_built", lambda: True)
    monkeypatch.setattr(_backend, "triton_runnable", lambda device: device.type == "cuda")
    monkeypatch.setattr(_backend, "_cuda_shortfall", lambda device: None)
    assert _backend.resolve_backend("auto", CUDA, fast_torch="sdpa") == "triton"
    assert _backend.resolve_backend("auto", CUDA) == "triton"
    assert _backend.resolve_backend("auto", cpu, fast_torch="sdpa") == "sdpa"  # the extension never runs on a CPU
    assert _backend.resolve_backend("cuda", CUDA) == "cuda"
    with pytest.raises(ValueError, match="backend: 'cuda' handles head dims up to 256"):
        _backend.resolve_backend("cuda", CUDA, cuda_unsupported="handles head dims up to 256, got 512")
    monkeypatch.setattr(_backend, "triton_runnable", lambda device: False)  # no Triton: the extension
    assert _backend.resolve_backend("auto", CUDA, fast_torch="sdpa") == "cuda"
    assert _backend.resolve_backend("auto", CUDA) == "cuda"
    assert _backend.resolve_backend("auto", CUDA, cuda_unsupported="handles no such thing", fast_torch="sdpa") == "sdpa"
    assert _backend.resolve_backend("auto", CUDA, cuda_unsupported="handles no such thing") == "torch"
    # a card with too little shared memory per block (sm_86/89: ~99 KiB): auto passes over cuda
    monkeypatch.setattr(_backend, "_cuda_shortfall", lambda device: "needs 160 KiB of shared memory per block; "
                        "NVIDIA L4 offers 99 KiB")
    assert _backend.resolve_backend("auto", CUDA, fast_torch="sdpa") == "sdpa"
    with pytest.raises(ValueError, match="backend: 'cuda' needs 160 KiB of shared memory per block; NVIDIA L4 offers"):
        _backend.resolve_backend("cuda", CUDA)
    monkeypatch.setattr(_backend, "cuda_extension_built", lambda: False)
    assert _backend.resolve_backend("auto", CUDA, fast_torch="sdpa") == "sdpa"
    with pytest.raises(ValueError, match="backend: 'cuda' needs the compiled extension specdec._C"):
        _backend.resolve_backend("cuda", CUDA)
    monkeypatch.setattr(_backend, "triton_runnable", lambda device: device.type == "cuda")
    assert _backend.resolve_backend("auto", CUDA, fast_torch="sdpa") == "triton"
    assert "cuda" in ops.BACKENDS


def test_tree_metadata_has_no_cuda_kernel():
    with pytest.raises(ValueError, match="backend: 'cuda' has no kernel for tree_metadata"):
        ops.tree_metadata(torch.tensor([[-1, 0]]), torch.tensor([2]), backend="cuda")


def test_limits_beyond_the_cuda_kernels_name_themselves():
    q = torch.randn(1, 1, 1, 260)
    kv = torch.randn(1, 1, 2, 260)
    with pytest.raises(ValueError, match="backend: 'cuda' handles head dims up to 256, got 260"):
        ops.tree_attention(q, kv, kv, torch.zeros(1, dtype=torch.int64), torch.ones(1, dtype=torch.int64),
                           torch.ones(1, 1, 1, dtype=torch.int32), backend="cuda")
    with pytest.raises(ValueError, match=r"backend: 'cuda' handles k <= 1024 and F \* k <= 8192, got k 1100"):
        ops.smart_expand(torch.randn(1, 1, 1200), torch.zeros(1, 1), torch.ones(1, dtype=torch.int64), torch.ones(1),
                         torch.ones(1), torch.ones(5), k=1100, alpha=0.8, budget=8, backend="cuda")


@pytest.mark.skipif(_backend.cuda_extension_built(), reason="the extension is built here")
def test_missing_extension_is_a_clear_error():
    with pytest.raises(RuntimeError, match="SPECDEC_BUILD_CUDA=1 pip install --no-build-isolation"):
        _cuda.ops()


def test_fake_kernels_give_the_launchers_shapes():
    """The fake (meta) kernels registered for torch.compile return what the CUDA launchers allocate."""
    meta = torch.device("meta")
    q = torch.empty(2, 8, 5, 64, dtype=torch.bfloat16, device=meta)
    out = _cuda.FAKES["tree_attention"](q, None, None, None, None, None, 0.125, 1)
    assert (out.shape, out.dtype, out.device, out.is_contiguous()) == (q.shape, q.dtype, meta, True)
    logits = torch.empty(3, 4, 100, dtype=torch.float16, device=meta)
    exp = _cuda.FAKES["smart_expand"](logits, None, None, None, None, None, 5, 0.8, 10, True)
    assert [(t.shape, t.dtype) for t in exp] == [((3, 20), torch.int64), ((3, 20), torch.int64),
                                                 ((3, 20), torch.float32), ((3, 20), torch.bool),
                                                 ((3,), torch.int64), ((3,), torch.float32)]
    assert [f.name for f in dataclasses.fields(ops.Expansion)] == [
        "tokens", "parent_slot", "logp", "keep", "tree_size", "expected_len"]  # the order the op returns
    hidden = torch.empty(7, 32, dtype=torch.bfloat16, device=meta)
    assert _cuda.FAKES["token_logprob"](hidden, None, None, None, 4).shape == (7,)
    assert _cuda.FAKES["token_logprob_from_logits"](torch.empty(7, 50, device=meta), None).dtype == torch.float32
    assert _cuda.FAKES["path_mean"](torch.empty(2, 9, device=meta), None, None).shape == (2, 9)


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")
def test_compile_check_fails_on_a_planted_error(tmp_path):
    """scripts/check_cuda_compile.sh (which CI runs on the real sources) fails on a copy of csrc/ with one
    undeclared identifier in the attention kernel, and stops at that first failure (seconds)."""
    csrc = tmp_path / "csrc"
    shutil.copytree(ROOT / "csrc", csrc)
    kernel = csrc / "tree_attention.cuh"
    text = kernel.read_text()
    line = "const float alpha = exp2f(m_old - m_safe);"
    assert line in text
    kernel.write_text(text.replace(line, "const float alpha = exp2f(m_old - m_safe) + undeclared_name;"))
    run = subprocess.run(["bash", str(ROOT / "scripts" / "check_cuda_compile.sh"), sys.executable],
                         env={**os.environ, "SPECDEC_CSRC": str(csrc)}, capture_output=True, text=True, timeout=600)
    assert run.returncode == 1, run.stdout + run.stderr
    assert 'identifier "undeclared_name" is undefined' in run.stdout
    assert "check_cuda_compile: FAILED" in run.stdout


# --------------------------------------------------------------------------- GPU parity (the Triton tests' grids)

def _tree(kind, B, T, seed):
    return make_tree(kind, B, T, seed, device="cuda")


TOL = {torch.float32: (1e-5, 1e-5), torch.float16: (3e-3, 3e-3), torch.bfloat16: (2e-2, 2e-2)}
DTYPES = [torch.float32, torch.float16, torch.bfloat16]


def _check_attention(q, k, v, start, length, mask, **kwargs):
    atol, rtol = TOL[q.dtype]
    out = ops.tree_attention(q, k, v, start, length, mask, backend="cuda", **kwargs)
    assert out.dtype == q.dtype and out.shape == q.shape
    torch.testing.assert_close(out, ops.tree_attention(q, k, v, start, length, mask, backend="torch"), atol=atol, rtol=rtol)
    torch.testing.assert_close(out, ops.tree_attention(q, k, v, start, length, mask, backend="triton", **kwargs),
                               atol=atol, rtol=rtol)
    return out


@pytest.mark.gpu(extension=True)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("T", [1, 2, 7, 33, 130])
@pytest.mark.parametrize("prefix", [0, 1, 45])
@pytest.mark.parametrize("Hq, Hkv", [(2, 2), (4, 2), (4, 1)])
def test_gpu_attention_matches_reference_and_triton(dtype, T, prefix, Hq, Hkv):
    tree = _tree("random", 3, T, seed=T + prefix)
    _check_attention(*attention_inputs(3, Hq, Hkv, T, 16, prefix, dtype, seed=T * 100 + prefix + Hq),
                     tree.ancestor_mask)


@pytest.mark.gpu(extension=True)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("D", [16, 24, 32, 64, 80, 128, 256])
@pytest.mark.parametrize("kind", ["chain", "star", "random"])
def test_gpu_attention_head_dims_and_shapes(dtype, D, kind):
    T = {"chain": 130, "star": 7, "random": 33}[kind]
    q, k, v, start, length = attention_inputs(3, 4, 2, T, D, 45, dtype, seed=D)
    _check_attention(q, k, v, start, length, _tree(kind, 3, T, seed=D).ancestor_mask)


@pytest.mark.gpu(extension=True)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("T, prefix, num_splits", [(7, 300, 2), (7, 300, 3), (33, 140, 3), (2, 45, 5), (7, 0, 4),
                                                   (64, 1300, 32)])
def test_gpu_attention_split_prefix(dtype, T, prefix, num_splits):
    q, k, v, start, length = attention_inputs(3, 4, 2, T, 64, prefix, dtype, seed=num_splits)
    mask = _tree("random", 3, T, seed=prefix).ancestor_mask
    out = _check_attention(q, k, v, start, length, mask, num_splits=num_splits)
    atol, rtol = TOL[dtype]
    torch.testing.assert_close(out, ops.tree_attention(q, k, v, start, length, mask, backend="cuda", num_splits=1),
                               atol=atol, rtol=rtol)


@pytest.mark.gpu(extension=True)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("num_splits", [1, 2])
def test_gpu_attention_wide_mask_and_garbage_slots(dtype, num_splits):
    """W > ceil(T/32), a query that sees nothing, NaN in every slot no query may read (left padding, tree
    slots no bit selects, slots after the region)."""
    B, T, W = 2, 3, 3
    gen = torch.Generator().manual_seed(7)
    bits = torch.rand(B, T, 32 * W, generator=gen) < 0.3
    bits[:, :, 70:] = False
    bits[:, torch.arange(T), 67 + torch.arange(T)] = True
    bits[1, 2] = False
    q, k, v, _, _ = attention_inputs(B, 4, 2, T, 64, 90, dtype, seed=3)
    start, length = torch.tensor([3, 0], device=CUDA), torch.tensor([20, 0], device=CUDA)
    mask = pack_bits(bits).to(CUDA)
    out = _check_attention(q, k, v, start, length, mask, num_splits=num_splits)
    assert out[1, :, 2].abs().max() == 0
    seen = torch.zeros(B, k.shape[2], dtype=torch.bool)
    for b in range(B):
        seen[b, int(start[b]):int(length[b])] = True
        region = bits[b].any(0)[: k.shape[2] - int(length[b])]
        seen[b, int(length[b]):int(length[b]) + region.numel()] = region
    hidden = (~seen).to(CUDA)[:, None, :, None]
    dirty = ops.tree_attention(q, k.masked_fill(hidden, float("nan")), v.masked_fill(hidden, float("nan")), start,
                               length, mask, backend="cuda", num_splits=num_splits)
    torch.testing.assert_close(dirty, out, atol=0, rtol=0)


@pytest.mark.gpu(extension=True)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_gpu_attention_noncontiguous_and_out(dtype):
    """Strided q/v/mask (HF layouts are transposes), a slice of a larger cache (k), int32 start/length as
    strided columns, a strided `out`; and K/V rows that are not 16-byte aligned (the non-cp.async path)."""
    B, Hq, Hkv, T, D, P = 2, 4, 2, 7, 64, 30
    q0, k0, v0, start, length = attention_inputs(B, Hq, Hkv, T, D, P, dtype, seed=5)
    mask0 = _tree("random", B, T, seed=5).ancestor_mask
    q = q0.transpose(1, 2).contiguous().transpose(1, 2)
    k = torch.cat([k0, k0], 2)[:, :, : k0.shape[2]]
    v = v0.transpose(1, 2).contiguous().transpose(1, 2)
    mask = mask0.transpose(1, 2).contiguous().transpose(1, 2)
    bounds = torch.stack([start, length], 1).to(torch.int32)
    out = torch.empty(B, T, Hq, D, dtype=dtype, device=CUDA).transpose(1, 2)
    res = ops.tree_attention(q, k, v, bounds[:, 0], bounds[:, 1], mask, out=out, backend="cuda")
    assert res.data_ptr() == out.data_ptr()
    want = ops.tree_attention(q0, k0, v0, start, length, mask0, backend="torch")
    atol, rtol = TOL[dtype]
    torch.testing.assert_close(out, want, atol=atol, rtol=rtol)
    shifted = torch.empty(k0.numel() + 1, dtype=dtype, device=CUDA)[1:].view(k0.shape)  # misaligned by 1 element
    shifted.copy_(k0)
    torch.testing.assert_close(ops.tree_attention(q0, shifted, v0, start, length, mask0, backend="cuda"), want,
                               atol=atol, rtol=rtol)


@pytest.mark.gpu(extension=True)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("num_splits", [None, 1, 6])
def test_gpu_attention_real_sizes_error_within_twice_torch(dtype, num_splits):
    """Llama-3-8B heads, against an fp64 oracle (docs/architecture.md): no worse than twice torch's own error in that
    precision, and than twice the reference's (fp32 math, output rounded)."""
    B, Hq, Hkv, D, T, prefix = 4, 32, 8, 128, 64, 1300
    mask = _tree("random", B, T, seed=11).ancestor_mask
    q, k, v, start, length = attention_inputs(B, Hq, Hkv, T, D, prefix, dtype, seed=11)
    scale = D**-0.5
    ours = ops.tree_attention(q, k, v, start, length, mask, backend="cuda", num_splits=num_splits)
    exact = ops.tree_attention_ref(q.double(), k.double(), v.double(), start, length, mask, scale=scale)

    def error(x):
        return (x.double() - exact).abs().max().item()

    err = error(ours)
    if dtype == torch.float32:
        assert err <= 1e-5, f"kernel error {err:.3g}"
    else:
        in_precision = error(ops.tree_attention_ref(q, k, v, start, length, mask, scale=scale, compute_dtype=dtype))
        upcast = error(ops.tree_attention_ref(q, k, v, start, length, mask, scale=scale))
        assert err <= 2 * in_precision and err <= 2 * upcast, (err, in_precision, upcast)


@pytest.mark.gpu(extension=True)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("V", [50, 97, 130, 32000])
@pytest.mark.parametrize("benefit", ["paper", "expected"])
def test_gpu_smart_expand_matches_reference_and_triton(dtype, V, benefit):

    c = expand_case(3, 4, V, seed=V, dtype=dtype)
    args = dict(k=3, alpha=0.8, budget=10, benefit=benefit)
    out = ops.smart_expand(**c, **args, backend="cuda")
    assert_same_expansion(out, ops.smart_expand_ref(**c, **args), atol=2e-6, rtol=1e-6)
    assert_same_expansion(out, ops.smart_expand(**c, **args, backend="triton"), atol=2e-6, rtol=1e-6)


@pytest.mark.gpu(extension=True)
def test_gpu_smart_expand_ties_budget_topk_and_empty():

    gen = torch.Generator().manual_seed(3)
    logits = torch.randint(0, 3, (2, 4, 70), generator=gen).float()  # ties everywhere
    logits[:, 2] = logits[:, 0]
    logits[1, 1] = logits[1, 0]
    flogp = torch.tensor([[-0.5, -1.0, -0.5, -math.inf], [-0.25, -0.25, -0.25, -math.inf]])
    c = dict(logits=logits.cuda(), frontier_logp=flogp.cuda(), tree_size=torch.tensor([1, 3], device=CUDA),
             expected_len=torch.tensor([1.0, 1.5], device=CUDA), num_paths=torch.tensor([1, 2], device=CUDA),
             cost=torch.tensor([1.0, 0.004, 0.0, 0.0, 1.0], device=CUDA))
    for benefit in ("paper", "expected"):
        assert_same_expansion(ops.smart_expand(**c, k=5, alpha=0.8, budget=20, benefit=benefit, backend="cuda"),
                    ops.smart_expand_ref(**c, k=5, alpha=0.8, budget=20, benefit=benefit), atol=2e-6, rtol=1e-6)
    ramp = torch.arange(130, dtype=torch.float32) / 10
    r = dict(logits=torch.stack([ramp, ramp.flip(0), (ramp - 6.5).abs()])[None].cuda(),
             frontier_logp=torch.zeros(1, 3, device=CUDA), tree_size=torch.tensor([1], device=CUDA),
             expected_len=torch.tensor([1.0], device=CUDA), num_paths=torch.tensor([1], device=CUDA),
             cost=torch.tensor([1.0, 0.1, 0.0, 0.0, 1.0], device=CUDA))
    for k in (5, 40, 130):
        assert_same_expansion(ops.smart_expand(**r, k=k, alpha=0.8, budget=500, backend="cuda"),
                    ops.smart_expand_ref(**r, k=k, alpha=0.8, budget=500), atol=2e-6, rtol=1e-6)
    b = expand_case(2, 3, 97, seed=5, scale=2.0, inactive=0.0)
    b["logits"] = b["logits"].transpose(1, 2).contiguous().transpose(1, 2)
    b["tree_size"] = torch.tensor([1, 3], device=CUDA)
    b["cost"] = torch.tensor([1.0, 0.001, 0.0, 0.0, 1.0], device=CUDA)
    args = dict(k=4, alpha=1.0, budget=6, benefit="expected")
    assert_same_expansion(ops.smart_expand(**b, **args, backend="cuda"), ops.smart_expand_ref(**b, **args), atol=2e-6, rtol=1e-6)
    e = expand_case(2, 2, 50)
    e["frontier_logp"] = torch.full((2, 2), -math.inf, device=CUDA)
    out = ops.smart_expand(**e, k=2, alpha=0.8, budget=10, backend="cuda")
    assert not out.keep.any() and (out.tokens == -1).all()
    assert torch.equal(out.tree_size, e["tree_size"].to(torch.int64))


@pytest.mark.gpu(extension=True)
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("benefit", ["paper", "expected"])
def test_gpu_smart_expand_real_size(dtype, benefit):
    """Real sizes: sorted log-probs match; near-ties may swap (the log-sum-exps differ in the last bit)."""

    c = expand_case(32, 64, 32000, seed=11, dtype=dtype, scale=4.0)
    args = dict(k=8, alpha=0.8, budget=64, benefit=benefit)
    ref = ops.smart_expand_ref(**c, **args)
    out = ops.smart_expand(**c, **args, backend="cuda")
    torch.testing.assert_close(out.logp, ref.logp, atol=1e-5, rtol=1e-5)
    near = torch.zeros_like(ref.keep)
    gap = (ref.logp[:, 1:] - ref.logp[:, :-1]).abs() <= 1e-5
    near[:, 1:] |= gap
    near[:, :-1] |= gap
    assert not (((out.tokens != ref.tokens) | (out.parent_slot != ref.parent_slot)) & ~near).any()
    assert ((out.tree_size - ref.tree_size).abs() <= 1).all()


@pytest.mark.gpu(extension=True)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("N, V, d", [(1, 97, 16), (5, 130, 40), (33, 97, 40), (5, 1000, 16), (33, 1000, 40),
                                     (1, 130, 40), (300, 32000, 896)])
@pytest.mark.parametrize("bias", [False, True])
def test_gpu_token_logprob_matches_exact_and_triton(dtype, N, V, d, bias):

    hidden, weight, b, targets = logprob_inputs(N, V, d, dtype=dtype, bias=bias, seed=N + V + d)
    out = ops.token_logprob(hidden, weight, targets, bias=b, backend="cuda")
    assert out.dtype == torch.float32 and out.shape == (N,)
    truth = exact_logprob(hidden, weight, targets, b)
    theirs = (ops.token_logprob_ref(hidden, weight, targets, bias=b).double() - truth).abs().max()
    ours = (out.double() - truth).abs().max()
    assert ours <= max(1e-5, 2 * theirs), (ours, theirs)  # fp32: summation error; 16-bit: docs/architecture.md
    torch.testing.assert_close(out, ops.token_logprob(hidden, weight, targets, bias=b, backend="triton"),
                               atol=1e-4, rtol=1e-5)
    assert torch.equal(out, ops.token_logprob(hidden, weight, targets, bias=b, backend="cuda"))  # deterministic


@pytest.mark.gpu(extension=True)
def test_gpu_token_logprob_strided():

    hidden, weight, _, targets = logprob_inputs(5, 130, 40, dtype=torch.float32, bias=False)
    wide = torch.zeros(5, 80, device=CUDA)
    wide[:, ::2] = hidden
    columns = torch.stack([targets, targets.flip(0)], 1).to(torch.int32)
    out = ops.token_logprob(wide[:, ::2], weight.t().contiguous().t(), columns[:, 0], backend="cuda")
    torch.testing.assert_close(out.double(), exact_logprob(hidden, weight, targets), atol=1e-5, rtol=1e-5)


@pytest.mark.gpu(extension=True)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("N, V", [(1, 97), (5, 1000), (33, 130), (64, 152064)])
def test_gpu_from_logits(dtype, N, V):
    token_logprob_from_logits_ref = ops.token_logprob_from_logits_ref
    gen = torch.Generator().manual_seed(N * V)
    logits = (4.0 * torch.randn(V, N, generator=gen)).to(dtype).cuda().t()
    targets = torch.randint(0, V, (N,), generator=gen).cuda()
    out = ops.token_logprob_from_logits(logits, torch.stack([targets, targets], 1)[:, 1], backend="cuda")
    torch.testing.assert_close(out.double(), token_logprob_from_logits_ref(logits.double(), targets), atol=1e-4, rtol=1e-5)
    masked = torch.randn(3, 200)
    masked[:, :70] = -math.inf
    masked[1, 150:] = -math.inf
    t = torch.tensor([100, 70, 199])
    torch.testing.assert_close(ops.token_logprob_from_logits(masked.cuda(), t.cuda(), backend="cuda").cpu(),
                               token_logprob_from_logits_ref(masked, t), atol=1e-6, rtol=1e-6)


@pytest.mark.gpu(extension=True)
@pytest.mark.parametrize("T", [1, 7, 33, 130, 1000])
def test_gpu_path_mean_bitwise_reference(T):

    logp, parents, num_nodes = path_mean_inputs(4, T, seed=T)
    args = (logp.cuda(), parents.cuda(), num_nodes.cuda())
    assert torch.equal(ops.path_mean(*args, backend="cuda"), ops.path_mean_ref(*args))  # same additions, same order
    int32 = ops.path_mean(logp.cuda().t().contiguous().t(), parents.to(torch.int32).cuda(), num_nodes.cuda(),
                          backend="cuda")
    assert torch.equal(int32, ops.path_mean_ref(*args))


@pytest.mark.gpu(extension=True)
def test_gpu_ops_trace_under_torch_compile():
    """The ops are torch.ops.specdec.* with fake kernels: opcheck passes and torch.compile(fullgraph) traces them."""
    lib = _cuda.ops()
    q, k, v, start, length = attention_inputs(2, 4, 2, 7, 64, 30, torch.bfloat16, seed=1)
    mask = _tree("random", 2, 7, seed=1).ancestor_mask
    args = (q, k, v, start, length, mask, 0.125, 2)
    torch.library.opcheck(lib.tree_attention.default, args, test_utils=("test_schema", "test_faketensor"))
    compiled = torch.compile(lambda *a: lib.tree_attention(*a) * 2, fullgraph=True)
    torch.testing.assert_close(compiled(*args), lib.tree_attention(*args) * 2)
    logp = torch.randn(2, 9, device=CUDA)
    parents = torch.tensor([[-1, 0, 0, 1, 1, 2, 2, 3, 3]] * 2, device=CUDA)
    torch.library.opcheck(lib.path_mean.default, (logp, parents, torch.tensor([9, 5], device=CUDA)),
                          test_utils=("test_schema", "test_faketensor"))


@pytest.mark.gpu(extension=True)
@pytest.mark.parametrize("mode", ["chain", "tree"])
def test_gpu_generator_identity_under_cuda(mode):
    """fp32: backend="cuda" == backend="torch" == model.generate(do_sample=False), token for token, on a ragged batch."""
    assert_gpu_generation_identity("cuda", mode)
