"""The `specdec` command line."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch
from tqdm import tqdm

from .generate import SpeculativeGenerator, Stats
from .models import DTYPES, load_model, load_tokenizer
from .suppliers import ARSupplier, DraftSupplier, PromptLookupSupplier, Supplier

METHODS = ("ar", "chain", "tree", "prompt-lookup")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="specdec", description="Tree-based speculative decoding for HF models.")
    sub = parser.add_subparsers(dest="command", required=True)
    gen = sub.add_parser("generate", help="generate text with a speculative method; prints text and stats")
    gen.add_argument("--target", required=True, help="target model: local path or hub id")
    gen.add_argument("--draft", help="draft model (methods chain and tree): local path or hub id")
    gen.add_argument("--method", choices=METHODS, default="tree")
    prompts = gen.add_mutually_exclusive_group(required=True)
    prompts.add_argument("--prompt", action="append", help="a prompt (repeat for several)")
    prompts.add_argument("--prompts-file", type=Path, help="a text file with one prompt per line, or .jsonl "
                         "with a 'prompt' (or Spec-Bench 'turns') field per line")
    gen.add_argument("--max-new-tokens", type=int, default=128)
    gen.add_argument("--batch-size", type=int, default=1)
    gen.add_argument("--dtype", choices=sorted(DTYPES), default="float32")
    gen.add_argument("--device", default="auto", help="auto, cpu, cuda, cuda:1, ...")
    gen.add_argument("--depth", type=int, default=5, help="draft depth (chain and tree)")
    gen.add_argument("--topk", type=int, default=4, help="children per frontier node (tree)")
    gen.add_argument("--total-tokens", type=int, default=32, help="tree size, root included (tree)")
    gen.add_argument("--json", action="store_true", help="print one JSON document instead of text")
    return parser


def read_prompts(args: argparse.Namespace) -> list[str]:
    if args.prompt:
        return list(args.prompt)
    text = args.prompts_file.read_text(encoding="utf-8")
    if args.prompts_file.suffix != ".jsonl":
        return [line for line in text.splitlines() if line.strip()]
    prompts = []
    for n, line in enumerate(text.splitlines(), 1):
        if line.strip():
            record = json.loads(line)
            prompt = record.get("prompt") or (record.get("turns") or [None])[0]
            if not isinstance(prompt, str):
                raise ValueError(f"--prompts-file: line {n} has no 'prompt' or 'turns' string")
            prompts.append(prompt)
    return prompts


def make_supplier(args: argparse.Namespace, target) -> Supplier:
    if args.method == "ar":
        return ARSupplier()
    if args.method == "prompt-lookup":
        return PromptLookupSupplier()
    if not args.draft:
        raise ValueError(f"--draft: method {args.method!r} needs a draft model")
    draft = load_model(args.draft, dtype=args.dtype, device=str(target.device))
    return DraftSupplier(draft, mode=args.method, depth=args.depth, topk=args.topk, total_tokens=args.total_tokens)


def merge_stats(parts: list[Stats]) -> dict:
    total = Stats()
    for s in parts:
        total.steps += s.steps
        total.new_tokens += s.new_tokens
        total.accepted_lengths += s.accepted_lengths
        total.tree_sizes += s.tree_sizes
        total.seconds += s.seconds
        for k, v in s.stage_seconds.items():
            total.stage_seconds[k] += v
    return total.to_dict()


def cmd_generate(args: argparse.Namespace) -> int:
    if args.max_new_tokens <= 0:
        raise ValueError(f"--max-new-tokens: expected > 0, got {args.max_new_tokens}")
    if args.batch_size <= 0:
        raise ValueError(f"--batch-size: expected > 0, got {args.batch_size}")
    prompts = read_prompts(args)
    tokenizer = load_tokenizer(args.target)
    target = load_model(args.target, dtype=args.dtype, device=args.device)
    generator = SpeculativeGenerator(target, make_supplier(args, target))
    results, stats = [], []
    batches = range(0, len(prompts), args.batch_size)
    for i in tqdm(batches, desc="prompts", unit="batch", disable=len(batches) < 2, file=sys.stderr):
        batch = prompts[i:i + args.batch_size]
        enc = tokenizer(batch, return_tensors="pt", padding=True).to(target.device)
        with torch.inference_mode():
            out = generator.generate(enc.input_ids, attention_mask=enc.attention_mask,
                                     max_new_tokens=args.max_new_tokens, pad_token_id=tokenizer.pad_token_id)
        new = out.sequences[:, enc.input_ids.shape[1]:]
        for prompt, row in zip(batch, new):
            results.append({"prompt": prompt, "completion": tokenizer.decode(row, skip_special_tokens=True)})
        stats.append(out.stats)
    summary = merge_stats(stats)
    if args.json:
        print(json.dumps({"method": args.method, "results": results, "stats": summary}, indent=1))
        return 0
    for r in results:
        print(f"### {r['prompt']}\n{r['completion']}\n")
    print(f"method {args.method}: {summary['new_tokens']} tokens in {summary['steps']} steps, "
          f"{summary['tokens_per_second']:.1f} tok/s, mean accepted length {summary['mean_accepted_length']:.2f}, "
          f"mean tree size {summary['mean_tree_size']:.1f}")
    return 0


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return {"generate": cmd_generate}[args.command](args)
    except ValueError as err:
        print(f"specdec: error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
