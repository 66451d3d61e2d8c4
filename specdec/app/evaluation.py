"""The runs behind `specdec demo` and `specdec bench`: methods x prompt sets x batch sizes on one model
pair (`EvalSettings`), with speedups and identity against AR (`harness` measures each run).

Errors are ValueErrors naming the setting or parameter ("datastore: ..."); the CLI reports its flag."""

from __future__ import annotations

import sys
from dataclasses import asdict, dataclass
from pathlib import Path

from tqdm import tqdm

from . import harness
from ..calibration import DEFAULT_WINDOW, Calibration, cached_calibration
from ..datastore import Datastore, stdlib_datastore, vocab_hash
from ..eagle import EagleHead
from .methods import DRAFT_METHODS, EAGLE_METHODS, EAGLE_SMART, PLANNED_METHODS, RETRIEVAL_METHODS
from .models import TOKENIZER_FILES, load_model, load_tokenizer, resolve_name
from ..profiling import DEFAULT_SIZES, Profile, cached_profile
from ..sampling import GREEDY, Sampling
from ..suppliers.base import position_limit
from ..valuspec import ValuSpecFilter

__all__ = ["AUTO_PROFILE", "EvalSettings", "check_tokenizers", "evaluate", "load_datastore", "load_eagle",
           "print_table", "smart_profile"]

AUTO_PROFILE = dict(context_len=256, sizes=DEFAULT_SIZES[:-1], repeats=3)


def load_datastore(path: Path | None, tokenizer, target_name: str, stdlib_files: int | None = None) -> Datastore:
    """The datastore for method retrieval: `path`, or with the demo target the cached standard-library one
    (its first `stdlib_files` files; None: all)."""
    if path is not None:
        try:
            return Datastore.open(path, tokenizer=tokenizer)
        except ValueError as err:
            raise ValueError(f"datastore: {err}") from None
    if target_name == "demo-target":
        return stdlib_datastore(tokenizer, max_files=stdlib_files)
    raise ValueError("datastore: method 'retrieval' needs a datastore built with the target's tokenizer "
                     "(specdec datastore build)")


def check_tokenizers(tokenizer, models: dict[str, str | None]) -> None:
    """ValueError naming the parameter when a draft's or scorer's tokenizer (`models`: parameter -> model
    name, None skipped) has another vocabulary than the target's `tokenizer` (their vocabulary hashes differ). Their
    embedding matrices may still differ in size (`specdec.vocab`). A checkpoint without tokenizer files is
    not compared: its ids are taken as the target's."""
    want = vocab_hash(tokenizer)
    for parameter, name in models.items():
        if name is None:
            continue
        path = Path(resolve_name(name, parameter))
        if path.is_dir() and not any((path / f).is_file() for f in TOKENIZER_FILES):
            continue
        other = load_tokenizer(name, parameter)
        if vocab_hash(other) != want:
            raise ValueError(f"{parameter}: {name} has another tokenizer than the target ({len(other)} vs {len(tokenizer)} "
                             "tokens, vocabulary hashes differ); drafts and scorers must share the target's tokenizer")


def load_eagle(path: str | None, target, target_name: str) -> EagleHead | None:
    """The EAGLE head for methods eagle/eagle-chain: `path` (a folder or "demo-eagle"), or with the demo
    target the embedded head; None for other targets without one."""
    if path is None and target_name != "demo-target":
        return None
    name = resolve_name("demo-eagle") if path in (None, "demo-eagle") else str(Path(path).expanduser())
    try:
        return EagleHead.from_pretrained(name, target)
    except ValueError as err:
        raise ValueError(f"eagle: {err}") from None


def smart_profile(path: Path | None, target, draft, batch_sizes: list[int]) -> Profile:
    """The cost profile for method smart: `path`, or this pair (`draft`: a model or an EAGLE head) measured
    here (cached) at `batch_sizes`, at a context of AUTO_PROFILE's 256 tokens or half the target's
    positions, whichever is less (the profile's trees need the other half)."""
    if path is not None:
        return Profile.load(path)
    print("specdec: profiling the pair for SMART's cost model (once per machine and pair; cached)", file=sys.stderr)
    settings = dict(AUTO_PROFILE)
    limit = position_limit(target)
    if limit is not None:
        settings["context_len"] = min(settings["context_len"], limit // 2)
    return cached_profile(target, draft, batch_sizes=tuple(sorted(set(batch_sizes))), **settings)


@dataclass(frozen=True)
class EvalSettings:
    """One `evaluate` run: `methods` (registry names, AR always first) x `prompt_sets` (their first
    `num_prompts` prompts) x `batch_sizes` on the pair `target` and `draft` (names as `models.resolve_name`
    reads them; None: no draft, its methods skipped)."""

    target: str
    draft: str | None
    prompt_sets: tuple[str, ...]
    num_prompts: int
    methods: tuple[str, ...]
    batch_sizes: tuple[int, ...] = (1,)
    max_new_tokens: int = 64
    dtype: str = "float32"
    device: str = "auto"
    chat: bool = False  # wrap prompts in the tokenizer's chat template
    sampling: Sampling = GREEDY
    seed: int | None = None  # the batch starting at prompt i samples with seed + i (None: unseeded)
    repeats: int = 1  # timed rounds, interleaved; per batch the fastest counts
    control: bool = False  # AR run again as "ar-control": its speedup over AR is the noise floor
    wide_methods: tuple[str, ...] | None = None  # the methods run at batch sizes > 1 (None: all)
    depth: int = 5  # static trees and chains
    topk: int = 4
    total_tokens: int = 32
    tree_sizes: tuple[int, ...] = ()  # several: one run per size, as tree-<size> (empty: total_tokens)
    budgets: tuple[int, ...] = (64,)  # retrieval's tree sizes; several: one run each, as retrieval-<budget>
    datastore: Path | None = None  # None: with the demo target the standard library's (`load_datastore`)
    stdlib_files: int | None = None  # ... built from its first N files (None: all)
    profile: Path | None = None  # SMART's cost profile (None: profiled here, cached); with one, ValuSpec is gated
    smart_variants: tuple[str, ...] = ("default",)  # `harness.smart_variant` specs: one smart run each
    eagle: str | None = None  # the EAGLE head (None: the demo target's own, `load_eagle`)
    eagle_shapes: tuple[tuple[int, int, int], ...] = ()  # EAGLE trees (depth, topk, total_tokens); empty: the above
    eagle_chain_depths: tuple[int, ...] = ()  # EAGLE chains (empty: depth)
    valuspec_methods: tuple[str, ...] = ()  # run labels also run through ValuSpec, the draft as scorer
    calibration_prompts: tuple[str, ...] = ()  # ... its tau calibrated on these


def variant_runs(settings: EvalSettings, runs: dict, cost: Profile | None) -> tuple[dict, dict]:
    """Static tree sizes (`tree_sizes`), SMART variants (`smart_variants`) and EAGLE shapes as runs of their
    own, in place of "tree", "smart" and the EAGLE methods; returns the runs and each label's make_supplier
    options."""
    out, options = {}, {}
    for label, (method, budget) in runs.items():
        if method == "tree":
            sizes = settings.tree_sizes or [settings.total_tokens]
            for n in sizes:
                name = "tree" if len(sizes) == 1 else f"tree-{n}"
                out[name], options[name] = (method, budget), {"total_tokens": n}
        elif method in ("smart", EAGLE_SMART):  # eagle-smart's cost, the head's profile, comes later
            for v in settings.smart_variants or ["default"]:
                name = method if v == "default" else f"{method}[{v}]"
                out[name], options[name] = (method, budget), {"smart": harness.smart_variant(v)}
                if method == "smart":
                    options[name]["cost"] = cost
        elif method == "eagle":  # one run per tree shape
            shapes = settings.eagle_shapes or [(settings.depth, settings.topk, settings.total_tokens)]
            for d, k, n in shapes:
                name = "eagle" if len(shapes) == 1 else f"eagle-{d}x{k}x{n}"
                out[name], options[name] = (method, budget), {"eagle_shape": (d, k, n)}
        elif method == "eagle-chain":
            depths = settings.eagle_chain_depths or [settings.depth]
            for d in depths:
                name = "eagle-chain" if len(depths) == 1 else f"eagle-chain-{d}"
                out[name], options[name] = (method, budget), {"eagle_shape": (d, 1, d + 1)}
        else:
            out[label] = (method, budget)
    return out, options


CONTROL = "ar-control"  # `specdec bench --control`: AR run again, whose speedup over AR is the noise floor


def evaluate(settings: EvalSettings) -> tuple[list[harness.MethodResult], dict]:
    """Run methods x prompt sets x batch sizes on one model pair; results carry speedup and identity vs AR.
    ValueError naming the setting that is wrong."""
    s = settings
    if s.max_new_tokens <= 0:
        raise ValueError(f"max_new_tokens: expected > 0, got {s.max_new_tokens}")
    if any(b <= 0 for b in s.batch_sizes):
        raise ValueError(f"batch_sizes: expected sizes > 0, got {list(s.batch_sizes)}")
    if any(b < 1 for b in s.budgets):
        raise ValueError(f"budgets: expected sizes >= 1, got {list(s.budgets)}")
    if s.seed is not None and s.seed < 0:
        raise ValueError(f"seed: expected an int >= 0, got {s.seed}")
    tokenizer = load_tokenizer(s.target, "target")
    check_tokenizers(tokenizer, {"draft": s.draft})
    methods = ["ar"] + [m for m in s.methods if m != "ar" and (s.draft is not None or m not in DRAFT_METHODS)]
    datastore = None  # before the models: a wrong store fails in milliseconds
    if set(methods) & set(RETRIEVAL_METHODS):
        datastore = load_datastore(s.datastore, tokenizer, s.target, s.stdlib_files)
    target = load_model(s.target, dtype=s.dtype, device=s.device, what="target")
    draft = load_model(s.draft, dtype=s.dtype, device=str(target.device), what="draft") if s.draft else None
    eagle = load_eagle(s.eagle, target, s.target) if set(methods) & set(EAGLE_METHODS) else None
    methods = [m for m in methods if eagle is not None or m not in EAGLE_METHODS]
    runs = {}  # label -> (method, retrieval budget), in the order of `methods`
    for m in methods:
        if m == "retrieval":  # one run per budget
            runs.update({m if len(s.budgets) == 1 else f"{m}-{b}": (m, b) for b in s.budgets})
        else:
            runs[m] = (m, max(s.budgets))  # retrieval-smart: the largest budget is its cap
        if m == "ar" and s.control:  # an A/A run: the same AR, measured right after it
            runs[CONTROL] = ("ar", max(s.budgets))
    # retrieval-smart and prompt-lookup-smart share SMART's profile (its target parts; they draft nothing)
    # ... and ValuSpec's cost gate, when a profile is at hand (a planned method, or `profile`)
    cost = (smart_profile(s.profile, target, draft, list(s.batch_sizes))
            if set(PLANNED_METHODS) & set(methods) or s.profile else None)
    runs, options = variant_runs(s, runs, cost)
    # eagle-smart: the head's own profile (its layer and catch-up are the head's forwards; `profile` is the pair's)
    eagle_smart = [label for label, (method, _) in runs.items() if method == EAGLE_SMART]
    eagle_cost = smart_profile(None, target, eagle, list(s.batch_sizes)) if eagle_smart else None
    for label in eagle_smart:
        options[label]["cost"] = eagle_cost
    calibration = valuspec_runs(s, runs, options, tokenizer, target, draft)
    results, outputs, skipped = [], {}, {}
    encoded = {}
    for ps in s.prompt_sets:
        tokens = harness.encode(tokenizer, harness.load_prompts(ps, s.num_prompts), s.chat)
        encoded[ps] = harness.fit(tokens, target, s.max_new_tokens)
        skipped[ps] = len(tokens) - len(encoded[ps])
    cells = [(ps, bs) for ps in s.prompt_sets for bs in s.batch_sizes]
    for ps, bs in tqdm(cells, desc="cells", file=sys.stderr):
        cell = []  # every method of this prompt set and batch size, measured interleaved
        for m in (m for m in runs if bs == 1 or s.wide_methods is None or runs[m][0] in s.wide_methods):
            method, budget = runs[m]
            supplier = harness.make_supplier(method, draft, **{"depth": s.depth, "topk": s.topk,
                                                               "datastore": datastore, "total_tokens": s.total_tokens,
                                                               "budget": budget, "cost": cost, "eagle": eagle,
                                                               **options.get(m, {})})
            filt = ValuSpecFilter(draft, calibration, cost_model=cost) if m.endswith("+valuspec") else None
            harness.run_method(target, supplier, encoded[ps][:bs], batch_size=bs, max_new_tokens=4, method=m,
                               prompt_set=ps, pad_token_id=tokenizer.pad_token_id, eos_token_id=None,
                               filter=filt, sampling=s.sampling, seed=s.seed)  # warm-up
            cell.append(harness.Run(m, supplier, filt))
        measured = harness.run_interleaved(target, cell, encoded[ps], batch_size=bs, max_new_tokens=s.max_new_tokens,
                                           pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id,
                                           prompt_set=ps, repeats=s.repeats, sampling=s.sampling, seed=s.seed)
        for run, (result, out) in zip(cell, measured):
            results.append(result)
            outputs[(run.method, ps, bs)] = out
    harness.compare_to_ar(results, outputs, identity=s.sampling.greedy)  # sampled outputs are draws, not AR's
    env = {**harness.environment(), "target": s.target, "draft": s.draft, "dtype": s.dtype,
           "temperature": s.sampling.temperature, "top_k": s.sampling.top_k, "top_p": s.sampling.top_p,
           "seed": s.seed, "max_new_tokens": s.max_new_tokens,
           "tree": {"depth": s.depth, "topk": s.topk, "total_tokens": s.total_tokens},
           "prompts_left_out_too_long": skipped}
    if datastore is not None:
        env["retrieval"] = {"datastore": str(datastore.path), "num_tokens": datastore.num_tokens,
                            "budgets": list(s.budgets)}
    if eagle is not None:
        env["eagle"] = {"head": s.eagle or "demo-eagle", "kind": eagle.config.kind,
                        "feature_layers": list(eagle.feature_layers), "draft_vocab": eagle.config.draft_vocab_size,
                        "runs": {m: options[m]["eagle_shape"] for m in runs if "eagle_shape" in options.get(m, {})}}
    if calibration is not None:
        env["valuspec"] = {"calibration": asdict(calibration), "scorer": s.draft}
    if cost is not None:
        env["smart"] = {"profile": asdict(cost), "variants": list(s.smart_variants) or ["default"]}
    if eagle_cost is not None:
        env["eagle_smart"] = {"profile": asdict(eagle_cost)}
    return results, env


def valuspec_runs(settings: EvalSettings, runs: dict, options: dict, tokenizer, target, draft) -> Calibration | None:
    """For each label in `settings.valuspec_methods`, a "<label>+valuspec" run with the draft as scorer, tau
    calibrated (once, cached) on `settings.calibration_prompts` at this run's max_new_tokens; the calibration."""
    methods = list(settings.valuspec_methods)
    unknown = [m for m in methods if m not in runs]
    if unknown:
        raise ValueError(f"valuspec_methods: {unknown} are not among this run's methods {sorted(runs)}")
    if not methods or draft is None:
        return None
    prompts = harness.fit(harness.encode(tokenizer, list(settings.calibration_prompts), settings.chat), target,
                          settings.max_new_tokens)
    calibration = cached_calibration(target, draft, prompts, max_new_tokens=settings.max_new_tokens,
                                     window=min(DEFAULT_WINDOW, settings.max_new_tokens),
                                     eos_token_id=tokenizer.eos_token_id)
    for m in methods:
        runs[f"{m}+valuspec"], options[f"{m}+valuspec"] = runs[m], options.get(m, {})
    return calibration


def print_table(results: list[harness.MethodResult]) -> None:
    print(f"{'method':<24}{'prompts':<12}{'batch':>6}{'tok/s':>9}{'speedup':>9}{'paired':>8}{'by round':>12}"
          f"{'accepted':>10}{'tree':>7}  identical")
    for r in results:
        rounds = r.speedup_by_round or []  # the paired per-round speedups: how far the best-of one may be noise
        spread = f"{min(rounds):.2f}-{max(rounds):.2f}" if len(rounds) > 1 else "-"
        paired = f"{r.speedup_paired:.2f}x" if r.speedup_paired is not None else "-"
        print(f"{r.method:<24}{r.prompt_set:<12}{r.batch_size:>6}{r.tokens_per_second:>9.1f}{r.speedup_vs_ar:>8.2f}x"
              f"{paired:>8}{spread:>12}{r.mean_accepted_length:>10.2f}{r.mean_tree_size:>7.1f}  {r.identity_note()}")
    for r in results:
        if r.plan is not None:
            p = r.plan
            print(f"{r.method} ({r.prompt_set}, batch {r.batch_size}): planner predicted {p['predicted_speedup']:.2f}x, "
                  f"measured {p['measured_speedup']:.2f}x by its c_T over its steps (no prompt step); "
                  f"{p['steps_drafted']} steps drafted, "
                  f"{p['steps_ar']} plain, {p['probes']} probes")
        if r.filter is not None:
            f = r.filter
            print(f"{r.method} (batch {r.batch_size}): kept {f['branch_keep_rate']:.1%} of branches and "
                  f"{f['node_keep_rate']:.1%} of nodes, AR fallbacks {f['ar_fallback_rate']:.1%}, filter "
                  f"{r.filter_share:.1%} of the time")
