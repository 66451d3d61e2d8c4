"""Train specdec's embedded demo pair: a small Llama target and a much smaller draft, one BPE tokenizer.

    python scripts/train_demo_pair.py [--out specdec/demo_pair] [--target-steps N] [--draft-steps N]

Corpus: the running Python's standard-library source (*.py, test suites included), without `encodings/`
(generated code tables the models learn to parrot) and `pydoc_data/`. Files whose path hash falls in the held-out
bucket (1 in 20) are kept for evaluation. The tokenizer is a byte-level BPE trained on the training files;
the target is trained on next-token loss; the draft is distilled from the target (next-token loss plus
KL to the target's distribution), which is what raises their greedy agreement.

Deterministic for a given Python stdlib, torch version and thread count: seeded generators, a fixed data
order, a fixed number of steps. Writes fp16 safetensors, configs, tokenizer files and `training.json`
(sizes, steps, held-out loss, teacher-forced greedy agreement, a sample completion).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import sysconfig
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

# Test suites stay in: they triple the code the models see (the first run without them overfitted:
# train loss 3.4, held-out 4.1). Generated tables and docs data go.
EXCLUDE = {"encodings", "pydoc_data", "site-packages", "__pycache__"}
SPECIALS = ["<|pad|>", "<|bos|>", "<|eos|>"]
SEQ = 256


def corpus() -> tuple[list[Path], list[Path]]:
    root = Path(sysconfig.get_paths()["stdlib"])
    files = sorted(f for f in root.rglob("*.py") if not EXCLUDE & set(f.relative_to(root).parts))
    held = [f for f in files if int(hashlib.sha1(str(f.relative_to(root)).encode()).hexdigest(), 16) % 20 == 0]
    train = [f for f in files if f not in set(held)]
    return train, held


def read(files: list[Path]) -> list[str]:
    return [f.read_text(encoding="utf-8", errors="replace") for f in files]


def train_tokenizer(texts: list[str], vocab: int) -> PreTrainedTokenizerFast:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab, special_tokens=SPECIALS, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(texts, trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token=SPECIALS[0], bos_token=SPECIALS[1],
                                   eos_token=SPECIALS[2], model_max_length=1024)


def encode(tokenizer: PreTrainedTokenizerFast, texts: list[str]) -> torch.Tensor:
    """All files joined by EOS into one token stream."""
    ids: list[int] = []
    for t in texts:
        ids += tokenizer(t, add_special_tokens=False).input_ids + [tokenizer.eos_token_id]
    return torch.tensor(ids, dtype=torch.int64)


def config(vocab: int, hidden: int, layers: int, heads: int, kv_heads: int, ffn: int) -> LlamaConfig:
    return LlamaConfig(vocab_size=vocab, hidden_size=hidden, intermediate_size=ffn, num_hidden_layers=layers,
                       num_attention_heads=heads, num_key_value_heads=kv_heads, max_position_embeddings=1024,
                       tie_word_embeddings=True, rope_theta=10000.0, pad_token_id=0, bos_token_id=1, eos_token_id=2)


def batches(stream: torch.Tensor, batch: int, steps: int, seed: int):
    """`steps` batches of random SEQ+1 windows, drawn from a seeded generator."""
    gen = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        start = torch.randint(0, len(stream) - SEQ - 1, (batch,), generator=gen)
        yield torch.stack([stream[s:s + SEQ + 1] for s in start.tolist()])


def lr_at(step: int, steps: int, peak: float, warmup: int = 50) -> float:
    if step < warmup:
        return peak * (step + 1) / warmup
    progress = (step - warmup) / max(1, steps - warmup)
    return peak * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress)))  # cosine down to 10%


def train(model: LlamaForCausalLM, stream: torch.Tensor, steps: int, batch: int, peak_lr: float, seed: int,
          teacher: LlamaForCausalLM | None = None, label: str = "") -> None:
    opt = torch.optim.AdamW(model.parameters(), lr=peak_lr, betas=(0.9, 0.95), weight_decay=0.1)
    model.train()
    t0 = time.time()
    for step, window in enumerate(batches(stream, batch, steps, seed)):
        for group in opt.param_groups:
            group["lr"] = lr_at(step, steps, peak_lr)
        x, y = window[:, :-1], window[:, 1:]
        logits = model(x).logits.float()
        loss = F.cross_entropy(logits.flatten(0, 1), y.flatten())
        if teacher is not None:
            with torch.no_grad():
                t_logp = torch.log_softmax(teacher(x).logits.float(), -1)
            kl = F.kl_div(torch.log_softmax(logits, -1), t_logp, log_target=True, reduction="batchmean") / SEQ
            loss = 0.5 * loss + 0.5 * kl
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if step % 50 == 0 or step == steps - 1:
            print(f"{label} step {step}/{steps} loss {loss.item():.3f} ({time.time() - t0:.0f} s)", flush=True)
    model.eval()


@torch.no_grad()
def evaluate(target: LlamaForCausalLM, draft: LlamaForCausalLM, stream: torch.Tensor, windows: int = 64) -> dict:
    """Held-out next-token loss of both models and the draft's teacher-forced greedy agreement with the target."""
    n = min(windows, (len(stream) - 1) // SEQ)
    x = stream[: n * SEQ].view(n, SEQ)
    y = stream[1: n * SEQ + 1].view(n, SEQ)
    out = {}
    t_logits = target(x).logits.float()
    d_logits = draft(x).logits.float()
    out["target_loss"] = F.cross_entropy(t_logits.flatten(0, 1), y.flatten()).item()
    out["draft_loss"] = F.cross_entropy(d_logits.flatten(0, 1), y.flatten()).item()
    out["greedy_agreement"] = (t_logits.argmax(-1) == d_logits.argmax(-1)).float().mean().item()
    out["eval_tokens"] = n * SEQ
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parents[1] / "specdec" / "demo_pair")
    parser.add_argument("--vocab", type=int, default=4096)
    parser.add_argument("--target-steps", type=int, default=1000)
    parser.add_argument("--draft-steps", type=int, default=800)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    t0 = time.time()
    train_files, held_files = corpus()
    train_texts, held_texts = read(train_files), read(held_files)
    tokenizer = train_tokenizer(train_texts, args.vocab)
    stream, held = encode(tokenizer, train_texts), encode(tokenizer, held_texts)
    print(f"corpus: {len(train_files)} train files ({len(stream)} tokens), {len(held_files)} held out ({len(held)})")
    target = LlamaForCausalLM(config(args.vocab, 256, 6, 4, 2, 704))
    draft = LlamaForCausalLM(config(args.vocab, 128, 1, 2, 1, 352))
    t1 = time.time()
    train(target, stream, args.target_steps, args.batch, 2e-3, seed=1, label="target")
    t2 = time.time()
    train(draft, stream, args.draft_steps, args.batch, 3e-3, seed=2, teacher=target, label="draft")
    t3 = time.time()
    metrics = evaluate(target, draft, held)
    prompt = "def fibonacci(n):\n    "
    ids = tokenizer(prompt, return_tensors="pt").input_ids
    sample = tokenizer.decode(target.generate(ids, max_new_tokens=48, do_sample=False,
                                              pad_token_id=0)[0, ids.shape[1]:])
    report = {
        "label": "specdec demo pair: small models trained on the Python standard library; a demo, not a real LM",
        "python_stdlib": sysconfig.get_paths()["stdlib"], "torch": torch.__version__, "threads": args.threads,
        "train_files": len(train_files), "held_out_files": len(held_files), "train_tokens": len(stream),
        "vocab": args.vocab, "seq_len": SEQ, "batch": args.batch,
        "target_params": sum(p.numel() for p in target.parameters()),
        "draft_params": sum(p.numel() for p in draft.parameters()),
        "target_steps": args.target_steps, "draft_steps": args.draft_steps,
        "seconds": {"tokenizer_and_data": t1 - t0, "target": t2 - t1, "draft": t3 - t2},
        **metrics, "sample_prompt": prompt, "sample_completion": sample,
    }
    for name, model in (("target", target), ("draft", draft)):
        model.half().save_pretrained(args.out / name)
        tokenizer.save_pretrained(args.out / name)
    (args.out / "training.json").write_text(json.dumps(report, indent=1))
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
