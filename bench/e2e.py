"""End-to-end benchmark: AR vs chain vs tree vs prompt lookup, measured in one run per configuration.

    python bench/e2e.py [--target PATH --draft PATH] [--batch-sizes 1 4] [--max-new-tokens 64] [--out DIR]

Without --target it builds a random-weight Llama target and, as its draft, a copy with noisy weights
(acceptance is then synthetic: it says how the machinery performs at a given acceptance, not how a real
pair would). Each method's output is checked against target.generate(do_sample=False) in the same run.
Writes <stamp>-e2e.json and .csv (device, dtype, commit, versions, one row per method x batch size).
Speedup = method tokens/s / AR tokens/s at the same batch size (Spec-Bench's convention); the mean
accepted length counts the bonus token.
"""

from __future__ import annotations

import argparse
import copy
import csv
import json
import sys
import time
from pathlib import Path

import torch
from transformers import LlamaConfig, LlamaForCausalLM

sys.path.insert(0, str(Path(__file__).parent))
from conftest import environment  # noqa: E402

import specdec  # noqa: E402
from specdec.models import load_model  # noqa: E402


def random_pair(seed: int = 0, noise: float = 0.15) -> tuple[LlamaForCausalLM, LlamaForCausalLM]:
    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=512, hidden_size=256, intermediate_size=688, num_hidden_layers=4,
                         num_attention_heads=8, num_key_value_heads=4, max_position_embeddings=2048)
    target = LlamaForCausalLM(config).eval()
    with torch.no_grad():
        target.lm_head.weight.mul_(8.0)  # random init is near uniform; sharpen so greedy choices are stable
        draft = copy.deepcopy(target)
        for p in draft.parameters():
            p.add_(noise * p.std() * torch.randn_like(p))
    return target, draft


def prompts(batch_size: int, length: int, vocab: int, seed: int = 0) -> torch.Tensor:
    """Prompts made of a repeated random motif, so prompt lookup has something to find."""
    gen = torch.Generator().manual_seed(seed)
    rows = []
    for _ in range(batch_size):
        motif = torch.randint(3, vocab, (length // 4,), generator=gen)
        rows.append(motif.repeat(4)[:length])
    return torch.stack(rows)


def suppliers(draft) -> dict[str, specdec.Supplier]:
    return {
        "ar": specdec.ARSupplier(),
        "chain": specdec.DraftSupplier(draft, mode="chain", depth=5),
        "tree": specdec.DraftSupplier(draft, mode="tree", depth=5, topk=4, total_tokens=32),
        "prompt_lookup": specdec.PromptLookupSupplier(),
    }


def run(target, draft, batch_sizes: list[int], max_new_tokens: int, prompt_len: int, repeats: int) -> list[dict]:
    rows = []
    vocab = target.config.vocab_size
    for B in batch_sizes:
        ids = prompts(B, prompt_len, vocab).to(target.device)
        ref = target.generate(ids, max_new_tokens=max_new_tokens, do_sample=False, pad_token_id=0, eos_token_id=None)
        ar_tps = None
        for name, supplier in suppliers(draft).items():
            gen = specdec.SpeculativeGenerator(target, supplier)
            gen.generate(ids, max_new_tokens=4, eos_token_id=[], pad_token_id=0)  # warm-up
            runs = []
            for _ in range(repeats):
                t0 = time.perf_counter()
                out = gen.generate(ids, max_new_tokens=max_new_tokens, eos_token_id=[], pad_token_id=0)
                runs.append((time.perf_counter() - t0, out))
            runs.sort(key=lambda r: r[0])
            seconds, out = runs[len(runs) // 2]  # the median run
            tps = out.stats.new_tokens / seconds
            ar_tps = tps if name == "ar" else ar_tps
            rows.append({"method": name, "batch_size": B, "prompt_len": prompt_len, "max_new_tokens": max_new_tokens,
                         "tokens_per_second": tps, "speedup_vs_ar": tps / ar_tps,
                         "mean_accepted_length": out.stats.mean_accepted_length,
                         "mean_tree_size": out.stats.mean_tree_size, "steps": out.stats.steps,
                         "seconds_median": seconds, "seconds_min": runs[0][0], "seconds_max": runs[-1][0],
                         "identical_to_generate": bool(torch.equal(out.sequences, ref))})
            print(json.dumps(rows[-1]))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--target")
    parser.add_argument("--draft")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 4])
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--prompt-len", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "out")
    args = parser.parse_args()
    if args.target:
        if not args.draft:
            parser.error("--draft is required with --target")
        target = load_model(args.target, dtype=args.dtype, device=args.device)
        draft = load_model(args.draft, dtype=args.dtype, device=args.device)
        models = {"target": args.target, "draft": args.draft}
    else:
        target, draft = random_pair()
        models = {"target": "random Llama 4x256 (vocab 512)", "draft": "target + 15% weight noise"}
    with torch.inference_mode():
        rows = run(target, draft, args.batch_sizes, args.max_new_tokens, args.prompt_len, args.repeats)
    env = {**environment(), **models, "dtype": str(target.dtype), "threads": torch.get_num_threads()}
    args.out.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    (args.out / f"{stamp}-e2e.json").write_text(json.dumps({"environment": env, "rows": rows}, indent=1))
    with open(args.out / f"{stamp}-e2e.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]) + sorted(env))
        writer.writeheader()
        writer.writerows({**r, **env} for r in rows)
    print(f"wrote {args.out / stamp}-e2e.json")


if __name__ == "__main__":
    main()
