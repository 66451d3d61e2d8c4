"""`specdec train-eagle`: the command line of `specdec.train_eagle`."""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import torch

from .._corpus import collect_documents
from .cli_checks import int_list
from .models import DTYPES, load_model, load_tokenizer
from ..training import TrainSettings, train_eagle
from ..verify import vocab_size

__all__ = ["add_train_eagle_parser", "cmd_train_eagle"]

MODEL_HELP = "a local path, a hub id, demo-target (the embedded demo target) or smollm2"



def add_train_eagle_parser(sub: argparse._SubParsersAction) -> None:
    tr = sub.add_parser("train-eagle", help="train an EAGLE-3 head for a target on its own greedy continuations of "
                        "text (specdec.train_eagle)")
    tr.add_argument("--target", required=True, help=MODEL_HELP)
    tr.add_argument("--out", type=Path, required=True, help="the head's folder (config.json, model.safetensors); it "
                    "also keeps the generated data and the checkpoints, so a rerun resumes")
    tr.add_argument("sources", nargs="+", type=Path, help="text files and folders (read recursively) or .npy token "
                    "arrays: the corpus whose windows the target continues")
    defaults = TrainSettings()
    tr.add_argument("--draft-vocab", type=int, default=None, help="draft vocabulary: the N most frequent target tokens "
                    "of the data (default: the whole vocabulary)")
    for flag, help_ in (("steps", "optimizer steps"), ("batch_size", "sequences per step"),
                        ("seq_len", "tokens per training sequence"),
                        ("prompt_len", "corpus tokens the target continues"),
                        ("num_sequences", "generated training sequences"), ("ttt_steps", "training-time test steps"),
                        ("checkpoint_every", "steps between checkpoints"),
                        ("seed", "seed of the data and the weights")):
        tr.add_argument("--" + flag.replace("_", "-"), type=int, default=getattr(defaults, flag),
                        help=f"{help_} (default {getattr(defaults, flag)})")
    tr.add_argument("--lr", type=float, default=defaults.lr, help=f"peak learning rate (default {defaults.lr})")
    tr.add_argument("--aux-layers", type=int_list, help="target hidden-state indices the head reads (default 2, "
                    "L//2, L-3)")
    tr.add_argument("--stop-at", type=int, help="stop after this step (a rerun resumes)")
    tr.add_argument("--dtype", choices=sorted(DTYPES), default="float32",
                    help="the target's (and the training's) dtype")
    tr.add_argument("--save-dtype", choices=sorted(DTYPES), help="dtype of the written head (default --dtype)")
    tr.add_argument("--device", default="auto")
    tr.add_argument("--quiet", action="store_true", help="no progress bars")


def cmd_train_eagle(args: argparse.Namespace) -> int:
    names = ("draft_vocab", "steps", "batch_size", "seq_len", "prompt_len", "num_sequences", "ttt_steps",
             "checkpoint_every", "seed", "lr")
    try:
        settings = TrainSettings(**{n: getattr(args, n) for n in names},
                                 aux_layers=tuple(args.aux_layers) if args.aux_layers else None)
        settings.check()
    except ValueError as err:
        name, _, rest = str(err).partition(":")
        raise ValueError(f"--{name.replace('_', '-')}:{rest}") from None
    if args.stop_at is not None and args.stop_at < 1:
        raise ValueError(f"--stop-at: expected an int >= 1, got {args.stop_at}")
    for source in args.sources:
        if not source.exists():
            raise ValueError(f"sources: no such file or folder: {source}")
    tokenizer = load_tokenizer(args.target)
    target = load_model(args.target, dtype=args.dtype, device=args.device)
    docs, _ = collect_documents(tokenizer, args.sources, [], vocab_size(target), progress=not args.quiet)
    eos = [] if tokenizer.eos_token_id is None else [tokenizer.eos_token_id]
    stream = torch.from_numpy(np.concatenate([np.concatenate([d, eos]) for d in docs]).astype(np.int64))
    result = train_eagle(target, stream, args.out, settings=settings, progress=not args.quiet, stop_at=args.stop_at,
                         save_dtype=DTYPES[args.save_dtype] if args.save_dtype else None)
    done = len(result.losses)
    print(f"{'wrote ' + str(args.out) if done == settings.steps else 'checkpointed'}: {done}/{settings.steps} steps, "
          f"loss {np.mean(result.losses[:10]):.3f} (first 10) -> {np.mean(result.losses[-10:]):.3f} (last 10), "
          f"{result.seconds['train']:.0f} s training, {result.seconds['data']:.0f} s generating data")
    return 0
