"""The Triton tree-attention kernel (docs/kernels.md, K1) against the torch reference.

Without a GPU the kernel runs under Triton's interpreter (tests/conftest.py sets TRITON_INTERPRET=1):
fp32 and fp16 only (bf16 arithmetic is wrong in the interpreter), tiny shapes (one launch costs
milliseconds). With a GPU the same grid runs on it, and the `gpu` tests add real sizes, bf16 and the
end-to-end identity check.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

import specdec
from specdec import ops
from specdec.tree import TreeBatch, pack_bits
from tests.gpu_identity import assert_gpu_generation_identity
from tests.helpers import ROOT, make_model, perturbed, ragged_prompts
from tests.helpers import make_tree as _make_tree
from tests.kernel_inputs import attention_inputs

pytest.importorskip("triton")

DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")
FP32 = (torch.float32, 1e-5, 1e-5)
FP16 = (torch.float16, 3e-3, 3e-3)


def make_tree(kind: str, B: int, T: int, seed: int) -> TreeBatch:
    return _make_tree(kind, B, T, seed, device=DEVICE)


def check(q, k, v, start, length, mask, atol, rtol, **kwargs):
    out = ops.tree_attention(q, k, v, start, length, mask, backend="triton", **kwargs)
    want = ops.tree_attention(q, k, v, start, length, mask, backend="torch")
    assert out.dtype == q.dtype and out.shape == q.shape
    torch.testing.assert_close(out, want, atol=atol, rtol=rtol)
    return out


@pytest.mark.parametrize("T", [1, 2, 7, 33])
@pytest.mark.parametrize("prefix", [0, 1, 45])
@pytest.mark.parametrize("Hq, Hkv", [(2, 2), (4, 2), (4, 1)])
def test_matches_reference(T, prefix, Hq, Hkv):
    dtype, atol, rtol = FP32
    tree = make_tree("random", 3, T, seed=T + prefix)
    q, k, v, start, length = attention_inputs(3, Hq, Hkv, T, 16, prefix, dtype, seed=T * 100 + prefix + Hq)
    check(q, k, v, start, length, tree.ancestor_mask, atol, rtol)


@pytest.mark.parametrize("dtype, atol, rtol", [FP32, FP16])
@pytest.mark.parametrize("D", [16, 32])
@pytest.mark.parametrize("kind", ["chain", "star", "random"])
def test_dtypes_head_dims_and_shapes(dtype, atol, rtol, D, kind):
    """T = 130 (the chain) spans several row tiles, so tree tiles above the diagonal are skipped."""
    T = {"chain": 130, "star": 7, "random": 33}[kind]
    tree = make_tree(kind, 3, T, seed=D)
    q, k, v, start, length = attention_inputs(3, 4, 2, T, D, 45, dtype, seed=D)
    check(q, k, v, start, length, tree.ancestor_mask, atol, rtol)


@pytest.mark.parametrize("D", [24, 64, 128])
def test_other_head_dims(D):
    """Head dims padded up to a power of two (24) and the large ones real models use (64, 128)."""
    dtype, atol, rtol = FP32
    tree = make_tree("random", 2, 5, seed=D)
    q, k, v, start, length = attention_inputs(2, 4, 2, 5, D, 45, dtype, seed=D)
    check(q, k, v, start, length, tree.ancestor_mask, atol, rtol)


@pytest.mark.parametrize("dtype, atol, rtol", [FP32, FP16])
@pytest.mark.parametrize("T, prefix, num_splits", [(7, 300, 2), (7, 300, 3), (33, 140, 3), (2, 45, 5), (7, 0, 4)])
def test_split_prefix(dtype, atol, rtol, T, prefix, num_splits):
    """Forced prefix splits merged by log-sum-exp: several chunks, empty splits (more splits than
    prefix tiles), and no prefix at all (only the last split, which holds the tree, sees anything)."""
    tree = make_tree("random", 3, T, seed=prefix)
    q, k, v, start, length = attention_inputs(3, 4, 2, T, 16, prefix, dtype, seed=num_splits)
    out = check(q, k, v, start, length, tree.ancestor_mask, atol, rtol, num_splits=num_splits)
    unsplit = ops.tree_attention(q, k, v, start, length, tree.ancestor_mask, backend="triton", num_splits=1)
    torch.testing.assert_close(out, unsplit, atol=atol, rtol=rtol)


@pytest.mark.parametrize("dtype, atol, rtol", [FP32, FP16])
@pytest.mark.parametrize("num_splits", [1, 2])
def test_wide_mask(dtype, atol, rtol, num_splits):
    """W > ceil(T/32): the queries are the newest nodes of a tree region grown layer by layer, so their
    bits address earlier region slots too; one query sees nothing at all (no prefix, empty mask row)."""
    B, T, W = 2, 3, 3
    gen = torch.Generator().manual_seed(7)
    bits = torch.rand(B, T, 32 * W, generator=gen) < 0.3
    bits[:, :, 70:] = False  # the region written so far: 70 slots, the queries at 67, 68, 69
    bits[:, torch.arange(T), 67 + torch.arange(T)] = True
    bits[1, 2] = False
    q, k, v, _, _ = attention_inputs(B, 4, 2, T, 16, 90, dtype, seed=3)  # S = 98 slots
    start, length = torch.tensor([3, 0], device=DEVICE), torch.tensor([20, 0], device=DEVICE)
    out = check(q, k, v, start, length, pack_bits(bits).to(DEVICE), atol, rtol, num_splits=num_splits)
    assert out[1, :, 2].abs().max() == 0
    # Region slots that no query sees (earlier layers' other branches) may hold anything.
    hidden = torch.zeros(B, k.shape[2], dtype=torch.bool)
    for b in range(B):
        hidden[b, int(length[b]):int(length[b]) + 32 * W] = ~bits[b].any(0)[: k.shape[2] - int(length[b])]
    hidden = hidden.to(DEVICE)[:, None, :, None]
    dirty = ops.tree_attention(q, k.masked_fill(hidden, float("nan")), v.masked_fill(hidden, float("nan")), start,
                               length, pack_bits(bits).to(DEVICE), backend="triton", num_splits=num_splits)
    torch.testing.assert_close(dirty, out, atol=0, rtol=0)


@pytest.mark.parametrize("num_splits", [1, 3])
def test_reads_no_slot_outside_prefix_and_tree(num_splits):
    """Left padding and the slots after the tree may hold garbage (NaN here): it never reaches the output."""
    dtype, atol, rtol = FP32
    B, T, prefix = 3, 7, 45
    tree = make_tree("random", B, T, seed=2)
    q, k, v, start, length = attention_inputs(B, 4, 2, T, 16, prefix, dtype, seed=2)
    want = ops.tree_attention(q, k, v, start, length, tree.ancestor_mask, backend="torch")
    slots = torch.arange(k.shape[2], device=DEVICE)[None, :]
    outside = ((slots < start[:, None]) | (slots >= length[:, None] + T))[:, None, :, None]
    out = ops.tree_attention(q, k.masked_fill(outside, float("nan")), v.masked_fill(outside, float("nan")), start,
                             length, tree.ancestor_mask, backend="triton", num_splits=num_splits)
    torch.testing.assert_close(out, want, atol=atol, rtol=rtol)


def test_noncontiguous_inputs_and_out():
    """Strided q/k/v/mask views (the HF layouts are transposes), strided start/length and a strided `out`
    are honoured."""
    dtype, atol, rtol = FP32
    B, Hq, Hkv, T, D, P = 2, 4, 2, 7, 16, 30
    tree = make_tree("random", B, T, seed=5)
    q0, k0, v0, start, length = attention_inputs(B, Hq, Hkv, T, D, P, dtype, seed=5)
    q = q0.transpose(1, 2).contiguous().transpose(1, 2)  # [B, Hq, T, D] view of [B, T, Hq, D]
    k = torch.cat([k0, k0], 2)[:, :, : k0.shape[2]]  # a slice of a larger cache buffer
    v = v0.transpose(1, 2).contiguous().transpose(1, 2)
    mask = tree.ancestor_mask.transpose(1, 2).contiguous().transpose(1, 2)
    out = torch.empty(B, T, Hq, D, dtype=dtype, device=DEVICE).transpose(1, 2)
    res = ops.tree_attention(q, k, v, start, length, mask, out=out, backend="triton")
    assert res.data_ptr() == out.data_ptr()
    want = ops.tree_attention(q0, k0, v0, start, length, tree.ancestor_mask, backend="torch")
    torch.testing.assert_close(out, want, atol=atol, rtol=rtol)
    bounds = torch.stack([start, length], 1).to(torch.int32)  # [B, 2]: start, length as strided columns
    split = ops.tree_attention(q, k, v, bounds[:, 0], bounds[:, 1], mask, backend="triton", num_splits=2,
                               out=torch.empty_like(out))
    torch.testing.assert_close(split, want, atol=atol, rtol=rtol)


def test_triton_backend_unavailable_raises(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "0")  # CPU tensors without the interpreter: nothing can run them
    tree = make_tree("chain", 1, 3, seed=0)
    q, k, v, start, length = (t.cpu() for t in attention_inputs(1, 2, 2, 3, 16, 4, torch.float32, seed=0))
    with pytest.raises(ValueError, match="backend: 'triton' cannot run on cpu"):
        ops.tree_attention(q, k, v, start, length, tree.ancestor_mask.cpu(), backend="triton")


@pytest.mark.parametrize("num_splits", [0, -1, 1.5])
def test_bad_num_splits(num_splits):
    tree = make_tree("chain", 1, 3, seed=0)
    q, k, v, start, length = attention_inputs(1, 2, 2, 3, 16, 4, torch.float32, seed=0)
    with pytest.raises(ValueError, match="num_splits: expected None or an int >= 1"):
        ops.tree_attention(q, k, v, start, length, tree.ancestor_mask, backend="triton", num_splits=num_splits)


@pytest.mark.hf
def test_generator_identity_under_triton():
    """The whole loop with both models' attention on the Triton kernel: prompt prefill (T = prompt
    length), the draft's wide masks and the verifier's trees, on a ragged batch."""
    target = make_model("llama").to(DEVICE)
    draft = perturbed(target)
    ids, mask = (t.to(DEVICE) for t in ragged_prompts([5, 9]))
    ref = target.generate(ids, attention_mask=mask, max_new_tokens=6, do_sample=False, pad_token_id=0)
    supplier = specdec.DraftSupplier(draft, mode="tree", depth=3, topk=2, total_tokens=6, backend="triton")
    gen = specdec.SpeculativeGenerator(target, supplier, backend="triton")
    out = gen.generate(ids, attention_mask=mask, max_new_tokens=6, pad_token_id=0, eos_token_id=[])
    assert torch.equal(out.sequences, ref)


HOPPER_COMPILE = r"""
import os, sys
import torch, triton
from triton.backends.compiler import GPUTarget
from triton.runtime import jit
from specdec import ops
from specdec.ops import logprob
from specdec.ops.tree_attention import kernel_module

for name in ("tree_attention", "tree_metadata", "smart_expand", "logprob"):
    kernel_module(name)  # compiled kernels, not interpreted ones
matmul_tiles = logprob._matmul_tiles
logprob._matmul_tiles = lambda device, N, dtype: matmul_tiles(torch.device("cuda"), N, dtype)  # the GPU tiles

class HopperWithoutGpu:  # what Triton's JIT asks of a driver before it would launch
    def get_current_device(self): return 0
    def get_current_stream(self, device=None): return 0
    def get_current_target(self): return GPUTarget("cuda", 90, 64)
    def get_active_torch_device(self): return torch.device("cpu")

triton.runtime.driver.set_active(HopperWithoutGpu())
launch = jit.JITFunction.run
jit.JITFunction.run = lambda self, *a, grid, warmup, **kw: print(
    self.__name__, sorted(kw.items()), (k := launch(self, *a, grid=grid, warmup=True, **kw)).metadata.shared,
    "wgmma" in k.asm["ptx"], flush=True)
os.environ["TRITON_INTERPRET"] = "1"  # lets the launchers' backend check pass; the kernels stay compiled ones
for dtype, B, Hq, Hkv, T, D, S, W, splits in (
        (torch.bfloat16, 4, 32, 8, 64, 128, 1376, 2, 1), (torch.float16, 1, 32, 8, 16, 128, 4112, 1, 8),
        (torch.float32, 4, 32, 8, 64, 128, 1376, 2, 3), (torch.float32, 1, 4, 1, 1, 16, 9, 1, 1),
        (torch.bfloat16, 1, 8, 2, 64, 256, 600, 2, 1)):  # D 256: shared memory must still fit
    q = torch.zeros(B, Hq, T, D, dtype=dtype)
    kv = torch.zeros(B, Hkv, S, D, dtype=dtype)
    ops.tree_attention(q, kv, kv, torch.zeros(B, dtype=torch.int32), torch.zeros(B, dtype=torch.int32),
                       torch.zeros(B, T, W, dtype=torch.int32), backend="triton", num_splits=splits)
ops.tree_metadata(torch.full((4, 256), -1), torch.full((4,), 256), backend="triton")
z = torch.zeros
ops.smart_expand(z(4, 8, 32000, dtype=torch.bfloat16), z(4, 8), torch.ones(4, dtype=torch.int64), torch.ones(4),
                 torch.ones(4), z(5), k=8, alpha=0.8, budget=64, backend="triton")
ops.token_logprob(z(256, 576, dtype=torch.bfloat16), z(49152, 576, dtype=torch.bfloat16),
                  z(256, dtype=torch.int64), backend="triton")
ops.token_logprob_from_logits(z(4, 32000, dtype=torch.bfloat16), z(4, dtype=torch.int64), backend="triton")
ops.path_mean(z(4, 256), torch.full((4, 256), -1), torch.full((4,), 256), backend="triton")
"""


@pytest.mark.slow  # about a minute on 2 cores: CI runs it against the GPU image's Triton 3.6, beside `pytest`
@pytest.mark.skipif(torch.cuda.is_available(), reason="the GPU tests below launch the kernels for real")
def test_kernels_compile_for_hopper_without_a_gpu():
    """Triton compiles every kernel for sm_90 (the H200) at real sizes, launch skipped: catches code the
    interpreter accepts but the compiler does not, and shared memory beyond Hopper's 227 KiB."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    run = subprocess.run([sys.executable, "-c", HOPPER_COMPILE], capture_output=True, text=True, env=env, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    lines = run.stdout.splitlines()
    assert len(lines) == 15, run.stdout  # 5 attention launches, 2 merges, metadata, K2 (2), K3 (2 + 2 merges, 1)
    for line in lines:
        name, *_, shared, wgmma = line.split()
        assert int(shared) <= 227 * 1024, line
    assert lines[0].startswith("_tree_attention_kernel") and lines[0].endswith("True"), lines[0]  # bf16: wgmma


# ---------------------------------------------------------------------------------------------- GPU only
@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
@pytest.mark.parametrize("num_splits", [None, 1, 6])
def test_gpu_real_sizes_error_within_twice_torch(dtype, num_splits):
    """Llama-3-8B heads at a real tree and prefix, against an fp64 oracle (docs/architecture.md): no worse than twice
    the error of torch computing the same in that precision; and, stricter, no worse than twice the
    error of the reference run on the same inputs (fp32 math, output rounded to `dtype`). fp32 errors
    are a few ulps either way: bounded absolutely."""
    B, Hq, Hkv, D, T, prefix = 4, 32, 8, 128, 64, 1300
    tree = make_tree("random", B, T, seed=11)
    q, k, v, start, length = attention_inputs(B, Hq, Hkv, T, D, prefix, dtype, seed=11)
    mask, scale = tree.ancestor_mask, D**-0.5
    ours = ops.tree_attention(q, k, v, start, length, mask, backend="triton", num_splits=num_splits)
    exact = ops.tree_attention_ref(q.double(), k.double(), v.double(), start, length, mask, scale=scale)

    def error(x: torch.Tensor) -> float:
        return (x.double() - exact).abs().max().item()

    err = error(ours)
    in_precision = error(ops.tree_attention_ref(q, k, v, start, length, mask, scale=scale, compute_dtype=dtype))
    upcast = error(ops.tree_attention_ref(q, k, v, start, length, mask, scale=scale))
    if dtype == torch.float32:
        assert err <= 1e-5, f"kernel error {err:.3g}"
    else:
        assert err <= 2 * in_precision, f"{dtype}: kernel error {err:.3g}, torch in {dtype} {in_precision:.3g}"
        assert err <= 2 * upcast, f"{dtype}: kernel error {err:.3g}, reference with fp32 math {upcast:.3g}"


@pytest.mark.gpu
@pytest.mark.parametrize("mode", ["chain", "tree"])
def test_gpu_generator_identity(mode):
    """On CUDA, fp32: Triton backend == torch backend == model.generate(do_sample=False), token for token."""
    assert_gpu_generation_identity("triton", mode)
