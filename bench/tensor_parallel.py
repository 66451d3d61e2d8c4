"""Tensor-parallel targets: tokens/s with the target sharded over 2 processes vs 1 process, same machine.

    python bench/tensor_parallel.py [--out bench/results/<date>-cpu-tp] [--new-tokens 64] [--repeats 3]

Launches each configuration as its own process group and writes `<out>/tensor-parallel.json` and `.csv`:
- "1 process, N threads": plain single-process decoding with all the machine's cores (OMP_NUM_THREADS=N);
- "1 process, 1 thread": the same with one core (what each rank of the next row has);
- "2 processes, 1 thread each": ``torchrun --nproc_per_node 2``, the target loaded with its tp plan.
Models: `random-150m`, a random-weight Llama (hidden 1024, 8 layers, 16 query / 4 key-value heads, vocab
32000, ~150M parameters), with AR and prompt lookup (the tree method that needs no trained draft; random
weights repeat themselves, so it accepts long paths); `demo`, the embedded pair (4 / 2 heads), with AR and
the draft tree (draft replicated on each rank). Batch 1, fp32, EOS off; each configuration decodes every
prompt `--repeats` times and keeps the best; every row also records whether its tokens equal those of
the first configuration. On a CPU this measures correctness and the overheads of sharding (one all-reduce
per attention and per MLP block, an all-gather of the logits), not GPU scaling.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
MODELS = {"random-150m": ("ar", "prompt-lookup"), "demo": ("ar", "tree")}


def make_random_model(path: Path) -> None:
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=32000, hidden_size=1024, intermediate_size=2816, num_hidden_layers=8,
                         num_attention_heads=16, num_key_value_heads=4, max_position_embeddings=2048,
                         tie_word_embeddings=False)
    model = LlamaForCausalLM(config)
    with torch.no_grad():  # sharper logits than the init's near-uniform ones: greedy paths are not ties
        model.lm_head.weight.mul_(8.0)
    model.save_pretrained(path)


def prompts(model: str, count: int) -> list[list[int]]:
    if model == "demo":
        from specdec.app.harness import load_prompts
        from specdec.app.models import load_tokenizer

        tokenizer = load_tokenizer("demo-target")
        return [tokenizer(p).input_ids for p in load_prompts("humaneval", count)]
    gen = torch.Generator().manual_seed(1)
    return [torch.randint(3, 32000, (16,), generator=gen).repeat(8).tolist() for _ in range(count)]


def run(args: argparse.Namespace) -> None:
    """One configuration (this process, or each rank of a torchrun launch): rows to `args.rows` (rank 0)."""
    import specdec
    from specdec.app.models import load_model
    from specdec.records import provenance

    tp = int(os.environ.get("WORLD_SIZE", "1")) > 1
    rank = int(os.environ.get("RANK", "0"))
    rows = []
    for name, methods in MODELS.items():
        target_name = "demo-target" if name == "demo" else str(args.model_dir)
        target = load_model(target_name, tensor_parallel=tp)
        draft = load_model("demo-draft") if name == "demo" else None
        params = sum(p.numel() for p in target.parameters())  # a DTensor counts its global size
        for method in methods:
            supplier = {"ar": lambda: specdec.ARSupplier(),
                        "prompt-lookup": lambda: specdec.PromptLookupSupplier(),
                        "tree": lambda: specdec.DraftSupplier(draft, mode="tree", depth=5, topk=4, total_tokens=32)}[method]()
            gen = specdec.SpeculativeGenerator(target, supplier)
            best, tokens, accepted = [], [], []
            for ids in prompts(name, args.prompts):
                input_ids = torch.tensor([ids])
                times = []
                for _ in range(args.repeats):
                    t0 = time.perf_counter()
                    with torch.inference_mode():
                        out = gen.generate(input_ids, max_new_tokens=args.new_tokens, eos_token_id=[])
                    times.append(time.perf_counter() - t0)
                best.append(min(times))
                tokens.append(out.sequences[0, len(ids):].tolist())
                accepted.append(out.stats.mean_accepted_length)
            rows.append({**provenance(), "config": args.label, "world_size": int(os.environ.get("WORLD_SIZE", "1")),
                         "threads_per_process": torch.get_num_threads(), "model": name, "parameters": params,
                         "dtype": "float32", "method": method, "batch_size": 1, "prompts": args.prompts,
                         "new_tokens": args.new_tokens, "repeats": args.repeats,
                         "tokens_per_second": args.prompts * args.new_tokens / sum(best),
                         "mean_accepted_length": sum(accepted) / len(accepted), "tokens": tokens})
    if rank == 0:
        with open(args.rows, "a") as f:
            for row in rows:
                f.write(json.dumps(row) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / f"{time.strftime('%Y-%m-%d')}-cpu-tp")
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--prompts", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--label", help=argparse.SUPPRESS)
    parser.add_argument("--rows", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--model-dir", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        return run(args)
    args.out.mkdir(parents=True, exist_ok=True)
    model_dir = args.out / "random-150m"  # gitignored: rebuilt from its seed
    if not (model_dir / "config.json").is_file():
        make_random_model(model_dir)
    rows = args.out / "rows.jsonl"
    rows.unlink(missing_ok=True)
    cores = os.cpu_count() or 1
    common = ["--worker", "--rows", str(rows), "--model-dir", str(model_dir), "--new-tokens", str(args.new_tokens),
              "--prompts", str(args.prompts), "--repeats", str(args.repeats)]
    launches = [(f"1 process, {cores} threads", cores, [sys.executable, __file__]),
                ("1 process, 1 thread", 1, [sys.executable, __file__]),
                ("2 processes, 1 thread each", 1, [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2",
                                                   __file__])]
    for label, threads, command in launches:
        print(f"== {label}", flush=True)
        env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
        subprocess.run([*command, *common, "--label", label], env=env, check=True)
    records = [json.loads(line) for line in rows.read_text().splitlines()]
    first = {(r["model"], r["method"]): r["tokens"] for r in records if r["config"] == launches[0][0]}
    base = {(r["model"], r["method"]): r["tokens_per_second"] for r in records if r["config"] == "1 process, 1 thread"}
    for r in records:
        r["same_tokens_as_first"] = r.pop("tokens") == first[r["model"], r["method"]]
        r["speedup_vs_1_thread"] = r["tokens_per_second"] / base[r["model"], r["method"]]
    (args.out / "tensor-parallel.json").write_text(json.dumps(records, indent=1))
    with open(args.out / "tensor-parallel.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(records[0]))
        writer.writeheader()
        writer.writerows(records)
    rows.unlink()
    for r in records:
        print(f"{r['config']:28s} {r['model']:12s} {r['method']:14s} {r['tokens_per_second']:7.1f} tok/s  "
              f"x{r['speedup_vs_1_thread']:.2f} vs 1 thread  accepted {r['mean_accepted_length']:.2f}  "
              f"same tokens {r['same_tokens_as_first']}")


if __name__ == "__main__":
    main()
