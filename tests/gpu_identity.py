"""The GPU decoding-identity check the Triton and CUDA test modules share: a backend's output on a ragged
batch against the torch backend's and `generate()`'s, saying where and which side parts when they do."""

from __future__ import annotations

import torch

import specdec
from specdec.app.harness import first_difference
from tests.helpers import make_model, perturbed, ragged_prompts


def assert_gpu_generation_identity(backend: str, mode: str) -> None:
    """On CUDA, fp32, a ragged batch ending raggedly (EOS in one row): `backend` == "torch" ==
    model.generate(do_sample=False), token for token."""
    target = make_model("llama").cuda()
    draft = perturbed(target)
    ids, mask = (t.cuda() for t in ragged_prompts([5, 11, 8]))
    # EOS 2 for both (the model's default): row 0 emits it at its 10th new token, so the batch ends raggedly
    ref = target.generate(ids, attention_mask=mask, max_new_tokens=24, do_sample=False, pad_token_id=0, eos_token_id=2)
    outs = {}
    for name in (backend, "torch"):
        supplier = specdec.DraftSupplier(draft, mode=mode, depth=4, topk=3, total_tokens=10, backend=name)
        gen = specdec.SpeculativeGenerator(target, supplier, backend=name)
        outs[name] = gen.generate(ids, attention_mask=mask, max_new_tokens=24, pad_token_id=0,
                                  eos_token_id=[2]).sequences
    assert torch.equal(outs[backend], outs["torch"]), \
        f"{backend} vs torch: {first_differences(outs[backend], outs['torch'])}"
    if not torch.equal(outs[backend], ref):  # which side is off: each row decoded alone, unpadded, by generate()
        def agrees(new: torch.Tensor, single: torch.Tensor) -> str:  # a row alone stops at EOS: pads after it
            n = single.shape[0]
            return "==" if torch.equal(new[:n], single) and bool((new[n:] == 0).all()) else "!="

        alone = []
        for row in range(ids.shape[0]):
            real = ids[row, mask[row].bool()][None]
            single = target.generate(real, max_new_tokens=24, do_sample=False, pad_token_id=0,
                                     eos_token_id=2)[0, real.shape[1]:]
            alone.append(f"row {row}: specdec {agrees(outs[backend][row, ids.shape[1]:], single)} generate() alone, "
                         f"generate() batched {agrees(ref[row, ids.shape[1]:], single)} generate() alone")
        raise AssertionError(f"{backend} vs generate(): {first_differences(outs[backend], ref)}; " + "; ".join(alone))


def first_differences(a: torch.Tensor, b: torch.Tensor) -> str:
    """Where two [B, L] token tensors part: each differing row's first column and the two tokens there (a
    failing identity assertion says where, not only that)."""
    if a.shape != b.shape:
        return f"shapes {tuple(a.shape)} and {tuple(b.shape)}"
    out = []
    for row, (x, y) in enumerate(zip(a.tolist(), b.tolist())):
        col = first_difference(x, y)
        if col is not None:
            out.append(f"row {row} from column {col} ({x[col]} vs {y[col]})")
    return "; ".join(out) or "equal"
