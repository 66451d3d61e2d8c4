"""Training an EAGLE-3 head for a target: `train_eagle` (and ``specdec train-eagle``).

The recipe (EAGLE-3's):

* **Data: the target's own greedy continuations.** Windows of `prompt_len` tokens are drawn from the
  corpus (seeded) and the target continues each greedily to `seq_len` tokens (specdec's own AR loop,
  batched). The head thus learns what the target says, not what the corpus says.
* **Draft vocabulary**: the `draft_vocab` most frequent target tokens in that data (``d2t``, ``t2d``).
* **Loss: soft cross-entropy** against the target's distribution restricted to the draft vocabulary
  (renormalised), at every position, read from one target forward per batch (its hidden states at the
  head's feature layers give the inputs).
* **Training-time test over `ttt_steps` steps**, weight ``step_decay ** j`` for step j: step 0 reads
  pairs (x_{t+1}, target feature f_t); step j reads (x_{t+1+j}, the head's own step j-1 output at t) and
  predicts x_{t+2+j}, attending to the step-0 keys of positions <= t and to its own earlier steps' keys
  at t: exactly what a depth-j draft node sees at inference (`EagleRunner`), so the head learns to draft
  from its own outputs. RoPE position of step j at t: t + j.
* AdamW, linear warm-up then cosine decay to 10%, gradient clipping, a fixed seed (data order is a
  function of (seed, step), so a resumed run sees the batches an uninterrupted one would), a tqdm bar,
  and checkpoints every `checkpoint_every` steps: ``checkpoint/`` holds the head and the optimizer's
  moments as safetensors and the step and history as JSON (never pickle).

* At the end, the greedy temperature (`calibrate_greedy_temperature`) on `calibration_sequences` fresh
  continuations: the ranking temperature under which the head's candidate probabilities predict greedy
  acceptance (written to config.json as ``specdec_greedy_temperature``; other engines ignore it).

Output: ``out_dir/config.json`` and ``model.safetensors`` in the EAGLE-3 layout `EagleHead.from_pretrained`
reads, and ``out_dir/data.npy`` (the generated sequences, reused on resume).
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import load_file, save_file
from torch import Tensor
from tqdm import tqdm
from transformers import PreTrainedModel

from .eagle import EagleHead
from .generate import SpeculativeGenerator
from .records import atomic_write_text, read_json
from .suppliers.base import ARSupplier

__all__ = ["TrainSettings", "train_eagle", "greedy_sequences", "ttt_logits", "ttt_losses", "token_stream",
           "calibrate_greedy_temperature"]


@dataclass(frozen=True)
class TrainSettings:
    """What `train_eagle` does; recorded in the checkpoint and in the result."""

    draft_vocab: int | None = None  # None: the whole target vocabulary
    steps: int = 1000
    batch_size: int = 8
    seq_len: int = 256
    prompt_len: int = 32
    num_sequences: int = 2048
    lr: float = 2e-3
    warmup: int = 30
    weight_decay: float = 0.0
    ttt_steps: int = 7
    step_decay: float = 0.8
    clip: float = 1.0
    seed: int = 0
    checkpoint_every: int = 100
    generate_batch: int = 64
    aux_layers: tuple[int, ...] | None = None
    intermediate_size: int | None = None
    kind: str = "eagle3"  # "eagle1": the EAGLE-1/2 layout trained with the same recipe (tests use it)
    calibration_sequences: int = 64  # fresh continuations the greedy temperature is fitted on

    def check(self) -> None:
        for name in ("steps", "batch_size", "seq_len", "prompt_len", "num_sequences", "ttt_steps",
                     "checkpoint_every", "generate_batch", "calibration_sequences"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name}: expected an int >= 1, got {value!r}")
        if self.seq_len <= self.prompt_len + self.ttt_steps:
            raise ValueError(f"seq_len: {self.seq_len} leaves no room after prompt_len {self.prompt_len} and "
                             f"{self.ttt_steps} test steps")
        for name, value, ok, want in (("lr", self.lr, self.lr > 0, "> 0"), ("clip", self.clip, self.clip > 0, "> 0"),
                                      ("step_decay", self.step_decay, 0 < self.step_decay <= 1, "in (0, 1]")):
            if not ok:
                raise ValueError(f"{name}: expected a number {want}, got {value!r}")
        if self.kind not in ("eagle3", "eagle1"):
            raise ValueError(f"kind: expected 'eagle3' or 'eagle1', got {self.kind!r}")
        if self.kind == "eagle1" and self.draft_vocab is not None:
            raise ValueError("draft_vocab: an EAGLE-1/2 head predicts through the target's LM head (whole vocabulary)")
        if self.draft_vocab is not None and (not isinstance(self.draft_vocab, int) or self.draft_vocab < 1):
            raise ValueError(f"draft_vocab: expected None or an int >= 1, got {self.draft_vocab!r}")


@dataclass
class TrainResult:
    head: EagleHead
    settings: TrainSettings
    losses: list[float] = field(default_factory=list)  # training loss per step (weighted sum over test steps)
    seconds: dict[str, float] = field(default_factory=dict)


def token_stream(data, tokenizer=None) -> Tensor:
    """One 1-D int64 token stream from a 1-D tensor/array of ids, a list of texts (with `tokenizer`), or a
    list of paths (``.npy`` id arrays; text files with `tokenizer`); documents joined by EOS when known."""
    if isinstance(data, (Tensor, np.ndarray)):
        stream = torch.as_tensor(data, dtype=torch.int64).reshape(-1)
    else:
        items = list(data)
        if not items:
            raise ValueError("data: empty")
        eos = [] if tokenizer is None or tokenizer.eos_token_id is None else [tokenizer.eos_token_id]
        ids: list[int] = []
        for item in items:
            if isinstance(item, (str, Path)) and Path(item).suffix == ".npy":
                ids += np.load(item, allow_pickle=False).astype(np.int64).reshape(-1).tolist() + eos
                continue
            text = Path(item).read_text(encoding="utf-8", errors="replace") if isinstance(item, Path) else item
            if tokenizer is None:
                raise ValueError("tokenizer: needed to train on texts (or pass token ids / .npy files)")
            ids += tokenizer(text, add_special_tokens=False).input_ids + eos
        stream = torch.tensor(ids, dtype=torch.int64)
    if stream.numel() < 2:
        raise ValueError(f"data: {stream.numel()} tokens, too few to train on")
    return stream


@torch.no_grad()
def greedy_sequences(target: PreTrainedModel, stream: Tensor, settings: TrainSettings, *,
                     progress: bool = True) -> Tensor:
    """[num_sequences, seq_len] int64: seeded corpus windows of `prompt_len` tokens, each continued
    greedily by the target (EOS does not stop it: the head must learn every position)."""
    s = settings
    if stream.numel() <= s.prompt_len:
        raise ValueError(f"data: {stream.numel()} tokens, fewer than prompt_len {s.prompt_len} + 1")
    gen = torch.Generator().manual_seed(s.seed)
    starts = torch.randint(0, stream.numel() - s.prompt_len, (s.num_sequences,), generator=gen)
    windows = torch.stack([stream[i:i + s.prompt_len] for i in starts.tolist()])  # [N, prompt_len]
    loop = SpeculativeGenerator(target, ARSupplier())
    out = []
    batches = range(0, s.num_sequences, s.generate_batch)
    for i in tqdm(batches, desc="target continuations", unit="batch", disable=not progress):
        ids = windows[i:i + s.generate_batch].to(target.device)
        pad = target.config.pad_token_id if target.config.pad_token_id is not None else 0
        seqs = loop.generate(ids, max_new_tokens=s.seq_len - s.prompt_len, eos_token_id=[], pad_token_id=pad).sequences
        out.append(seqs.cpu())
    return torch.cat(out)


def draft_vocabulary(sequences: Tensor, size: int | None, vocab: int) -> Tensor:
    """The `size` most frequent ids of `sequences` (ties: lower id first), sorted: [size] int64."""
    if size is None or size >= vocab:
        return torch.arange(vocab)
    counts = torch.bincount(sequences.reshape(-1), minlength=vocab)
    order = torch.sort(-counts, stable=True).indices[:size]
    return torch.sort(order).values


def target_batch(target: PreTrainedModel, tokens: Tensor, layers: tuple[int, ...],
                 vocab: Tensor | None) -> tuple[Tensor, Tensor]:
    """The target's features [B, S, k * d] at `layers` (``hidden_states`` indices) and its distribution
    restricted to the draft vocabulary `vocab` (renormalised) [B, S, Vd], float32."""
    with torch.no_grad():
        out = target(input_ids=tokens, output_hidden_states=True)
        features = torch.cat([out.hidden_states[i] for i in layers], -1)
        logits = out.logits.float() if vocab is None else out.logits.float()[..., vocab]
        return features, torch.softmax(logits, -1)


def ttt_logits(head: EagleHead, tokens: Tensor, features: Tensor, steps: int) -> list[Tensor]:
    """The head's draft-vocabulary logits at each training-time-test step (module docstring).

    tokens: [B, S] int64; features: [B, S, k * d] the target's. Step j's logits [B, S - 1 - j, Vd] at pair t
    predict tokens[:, t + 2 + j] (the target's distribution at position t + 1 + j).
    """
    B, S = tokens.shape
    n = S - 1  # pairs (tokens[t + 1], features[t]), t < n
    position = torch.arange(n, device=tokens.device)
    hidden, keys, values, out_logits = features[:, :n], [], [], []
    for j in range(min(steps, n)):
        m = n - j  # pairs whose step-j token tokens[t + 1 + j] exists
        x, residual = head.layer_inputs(tokens[:, 1 + j:1 + j + m], hidden[:, :m], project=j == 0)
        q, k, v = head.qkv(x, (position[:m] + j).expand(B, m))
        keys.append(k)
        values.append(v)
        hidden = head.finish(_ttt_attention(q, keys, values, head.scale), residual)  # [B, m, H]
        out_logits.append(head.draft_logits(hidden))
    return out_logits


def ttt_losses(head: EagleHead, tokens: Tensor, features: Tensor, probs: Tensor, steps: int) -> list[Tensor]:
    """Soft cross-entropy of each training-time-test step against probs [B, S, Vd], the target's restricted
    distribution at every position (probs[:, t] predicts tokens[:, t + 1]); scalars."""
    return [-(probs[:, 1 + j:1 + j + lg.shape[1]] * torch.log_softmax(lg.float(), -1)).sum(-1).mean()
            for j, lg in enumerate(ttt_logits(head, tokens, features, steps))]


@torch.no_grad()
def calibrate_greedy_temperature(head: EagleHead, target: PreTrainedModel, sequences: Tensor, *, topk: int = 4,
                                 steps: int = 7, batch_size: int = 8) -> float:
    """The temperature tau that makes softmax(logits / tau) of the head's top-`topk` candidates the best
    predictor (binary cross-entropy, grid search over 0.05..2) of "this candidate is the target's argmax",
    over every training-time-test step of `sequences` [N, S] (held-out target continuations). Greedy
    verification accepts exactly those candidates, so these are the probabilities a tree should rank by."""
    vocab = torch.arange(head.config.vocab_size, device=target.device)[head.t2d] if head.config.kind == "eagle3" \
        else None
    taus = torch.logspace(math.log10(0.05), math.log10(2.0), 48)
    loss = torch.zeros(len(taus), dtype=torch.float64)
    for i in range(0, len(sequences), batch_size):
        tokens = sequences[i:i + batch_size].to(target.device)
        features, probs = target_batch(target, tokens, head.feature_layers, vocab)
        for j, logits in enumerate(ttt_logits(head, tokens, features, steps)):
            logits = logits.float()
            top = logits.topk(topk, -1)  # [B, m, k]
            hit = (top.indices == probs[:, 1 + j:1 + j + logits.shape[1]].argmax(-1, keepdim=True)).double()
            for t, tau in enumerate(taus.tolist()):
                p = (top.values / tau - torch.logsumexp(logits / tau, -1, keepdim=True)).exp().double()
                p = p.clamp(1e-9, 1 - 1e-9)
                loss[t] -= (hit * p.log() + (1 - hit) * (1 - p).log()).sum().item()
    return round(float(taus[int(loss.argmin())]), 4)


def _ttt_attention(q: Tensor, keys: list[Tensor], values: list[Tensor], scale: float) -> Tensor:
    """Step j's attention: query t sees step 0's keys at positions <= t and steps 1..j's keys at t.
    q: [B, Hq, m, D]; keys[i], values[i]: [B, Hkv, n - i, D]. Returns [B, Hq, m, D]."""
    B, Hq, m, D = q.shape
    group = Hq // keys[0].shape[1]
    k0, v0 = (t.repeat_interleave(group, 1)[:, :, :m] for t in (keys[0], values[0]))  # only t' <= t < m matter
    scores = (q @ k0.transpose(-1, -2)) * scale  # [B, Hq, m, m]
    causal = torch.ones(m, m, dtype=torch.bool, device=q.device).tril()
    scores = scores.masked_fill(~causal, float("-inf"))
    own = [(q * ki.repeat_interleave(group, 1)[:, :, :m]).sum(-1, keepdim=True) * scale for ki in keys[1:]]
    probs = torch.softmax(torch.cat([scores, *own], -1).float(), -1).to(q.dtype)
    out = probs[..., :m] @ v0
    for i, vi in enumerate(values[1:]):
        out = out + probs[..., m + i:m + i + 1] * vi.repeat_interleave(group, 1)[:, :, :m]
    return out


def _lr(step: int, s: TrainSettings) -> float:
    if step < s.warmup:
        return s.lr * (step + 1) / s.warmup
    progress = (step - s.warmup) / max(1, s.steps - s.warmup)
    return s.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress)))


def train_eagle(target: PreTrainedModel, data, out_dir: str | Path, *, tokenizer=None,
                settings: TrainSettings | None = None, progress: bool = True, save_dtype: torch.dtype | None = None,
                stop_at: int | None = None, **overrides) -> TrainResult:
    """Train an EAGLE-3 head for `target` on `data` (see `token_stream`) with the module's recipe.

    settings: a `TrainSettings` (keyword `overrides` replace its fields, e.g. ``steps=200``). Resumes from
    ``out_dir/checkpoint`` when one exists with the same settings. stop_at: stop after this step (with a
    checkpoint; a later call resumes), to train in slices. save_dtype: the dtype of the written head
    (default: the target's). Returns the head (in the target's dtype) and the loss history of every step.
    """
    s = TrainSettings(**{**asdict(settings or TrainSettings()), **overrides})
    s.check()
    target.eval().requires_grad_(False)  # the head reads the target's embeddings; only the head learns
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    stream = token_stream(data, tokenizer)
    sequences = _cached_sequences(target, stream, s, out, progress)
    vocab_ids = draft_vocabulary(sequences, s.draft_vocab, target.get_output_embeddings().weight.shape[0])
    head = EagleHead.initialize(target, kind=s.kind, draft_vocab=vocab_ids, aux_layers=s.aux_layers,
                                intermediate_size=s.intermediate_size, seed=s.seed)
    head.train()
    params = [p for p in head.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=s.lr, betas=(0.9, 0.95), weight_decay=s.weight_decay)
    result = TrainResult(head, s)
    start = _resume(out / "checkpoint", head, opt, s, result)
    vocab = None if len(vocab_ids) == head.config.vocab_size else vocab_ids.to(target.device)
    t1 = time.perf_counter()
    end = s.steps if stop_at is None else min(s.steps, stop_at)
    bar = tqdm(range(start, end), desc="train eagle head", unit="step", disable=not progress, initial=start,
               total=s.steps)
    for step in bar:
        _train_step(head, target, sequences, opt, params, vocab, s, step, result)
        bar.set_postfix(loss=f"{result.losses[-1]:.3f}")
        if (step + 1) % s.checkpoint_every == 0 or step + 1 == end:
            seconds = result.seconds.get("train", 0.0) + time.perf_counter() - t1
            _save_checkpoint(out / "checkpoint", head, opt, s, step + 1, result, seconds)
    result.seconds = {"data": read_json(out / "data.json", "out_dir")["seconds"],
                      "train": result.seconds.get("train", 0.0) + time.perf_counter() - t1}
    head.eval()
    if end == s.steps:  # done: fit the greedy temperature on continuations the head has not seen
        held = greedy_sequences(target, stream, replace(s, num_sequences=s.calibration_sequences, seed=s.seed + 1),
                                progress=False)
        head.config = replace(head.config, greedy_temperature=calibrate_greedy_temperature(
            head, target, held, steps=s.ttt_steps))
    head.save_pretrained(out, dtype=save_dtype)
    return result


@torch.enable_grad()  # trains whatever the caller's grad mode (the head's parameters only)
def _train_step(head: EagleHead, target: PreTrainedModel, sequences: Tensor, opt: torch.optim.Optimizer,
                params: list[Tensor], vocab: Tensor | None, s: TrainSettings, step: int, result: TrainResult) -> None:
    """One optimizer step on the batch of `step` (a function of the seed and the step: resumable)."""
    gen = torch.Generator().manual_seed(s.seed * 7919 + step)
    pick = torch.randint(0, len(sequences), (s.batch_size,), generator=gen)
    tokens = sequences[pick].to(target.device)
    features, probs = target_batch(target, tokens, head.feature_layers, vocab)
    losses = ttt_losses(head, tokens, features, probs, s.ttt_steps)
    loss = sum(s.step_decay ** j * loss_j for j, loss_j in enumerate(losses))
    for group in opt.param_groups:
        group["lr"] = _lr(step, s)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(params, s.clip)
    opt.step()
    result.losses.append(float(loss.detach()))


def _cached_sequences(target: PreTrainedModel, stream: Tensor, s: TrainSettings, out: Path, progress: bool) -> Tensor:
    """The generated training sequences, read back from ``out/data.npy`` when its header matches."""
    key = {"num_sequences": s.num_sequences, "seq_len": s.seq_len, "prompt_len": s.prompt_len, "seed": s.seed}
    meta = out / "data.json"
    if meta.is_file() and (out / "data.npy").is_file() and read_json(meta, "out_dir")["key"] == key:
        return torch.from_numpy(np.load(out / "data.npy", allow_pickle=False).astype(np.int64))
    t0 = time.perf_counter()
    sequences = greedy_sequences(target, stream, s, progress=progress)
    np.save(out / "data.npy", sequences.numpy().astype(np.int32))
    atomic_write_text(meta, json.dumps({"key": key, "seconds": time.perf_counter() - t0}))
    return sequences


def _save_checkpoint(path: Path, head: EagleHead, opt: torch.optim.Optimizer, s: TrainSettings, step: int,
                     result: TrainResult, seconds: float) -> None:
    path.mkdir(parents=True, exist_ok=True)
    save_file({k: v.detach().cpu().contiguous() for k, v in head.state_dict().items()}, str(path / "head.safetensors"))
    moments = {f"{i}.{name}": t.detach().cpu().contiguous() for i, state in opt.state_dict()["state"].items()
               for name, t in state.items()}
    save_file(moments, str(path / "optimizer.safetensors"))
    atomic_write_text(path / "state.json", json.dumps({"step": step, "settings": asdict(s), "losses": result.losses,
                                                       "seconds": seconds}))


def _resume(path: Path, head: EagleHead, opt: torch.optim.Optimizer, s: TrainSettings, result: TrainResult) -> int:
    """Load a checkpoint written with the same settings; returns the step to continue from (0: none)."""
    if not (path / "state.json").is_file():
        return 0
    state = read_json(path / "state.json", "out_dir")
    saved = {**asdict(TrainSettings()), **state["settings"]}  # fields added since: their defaults
    saved["aux_layers"] = tuple(saved["aux_layers"]) if saved.get("aux_layers") is not None else None
    if saved != asdict(s):
        raise ValueError(f"out_dir: {path} holds a checkpoint of other settings; use another out_dir or delete it")
    device = head.fc.weight.device
    head.load_state_dict({k: v.to(device) for k, v in load_file(str(path / "head.safetensors")).items()})
    head._set_map()
    moments = load_file(str(path / "optimizer.safetensors"))
    per_param: dict[int, dict[str, Tensor]] = {}
    for name, t in moments.items():
        i, key = name.split(".", 1)
        per_param.setdefault(int(i), {})[key] = t.to(device) if key != "step" else t
    opt_state = opt.state_dict()
    opt_state["state"] = per_param
    opt.load_state_dict(opt_state)
    result.losses = list(state["losses"])
    result.seconds = {"train": float(state["seconds"])}  # training time of the earlier slices
    return int(state["step"])
