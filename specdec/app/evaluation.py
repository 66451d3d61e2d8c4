"""The runs behind `specdec demo` and `specdec bench`: methods x prompt sets x batch sizes on one model
pair, from the parsed command line, with speedups and identity against AR (`harness` measures each run)."""

from __future__ import annotations

import argparse
import sys
from dataclasses import asdict
from pathlib import Path

from tqdm import tqdm

from . import harness
from ..calibration import DEFAULT_WINDOW, Calibration, cached_calibration
from ..datastore import Datastore, stdlib_datastore, vocab_hash
from ..eagle import EagleHead
from .methods import DRAFT_METHODS, EAGLE_METHODS, EAGLE_SMART, PLANNED_METHODS, RETRIEVAL_METHODS
from .models import TOKENIZER_FILES, load_model, load_tokenizer, resolve_name
from ..profiling import DEFAULT_SIZES, Profile, cached_profile
from ..sampling import Sampling
from ..suppliers.base import position_limit
from ..valuspec import ValuSpecFilter

__all__ = ["AUTO_PROFILE", "check_tokenizers", "eagle_shape", "evaluate", "load_datastore", "load_eagle",
           "print_table", "sampling_options", "smart_profile"]

AUTO_PROFILE = dict(context_len=256, sizes=DEFAULT_SIZES[:-1], repeats=3)


def load_datastore(path: Path | None, tokenizer, target_name: str, stdlib_files: int | None = None) -> Datastore:
    """The datastore for method retrieval: `path`, or with the demo target the cached standard-library one
    (its first `stdlib_files` files; None: all)."""
    if path is not None:
        try:
            return Datastore.open(path, tokenizer=tokenizer)
        except ValueError as err:
            raise ValueError(f"--datastore: {err}") from None
    if target_name == "demo-target":
        return stdlib_datastore(tokenizer, max_files=stdlib_files)
    raise ValueError("--datastore: method 'retrieval' needs a datastore built with the target's tokenizer "
                     "(specdec datastore build)")


def check_tokenizers(tokenizer, models: dict[str, str | None]) -> None:
    """ValueError naming the flag when a draft's or scorer's tokenizer (`models`: flag -> model name, None
    skipped) has another vocabulary than the target's `tokenizer` (their vocabulary hashes differ). Their
    embedding matrices may still differ in size (`specdec.vocab`). A checkpoint without tokenizer files is
    not compared: its ids are taken as the target's."""
    want = vocab_hash(tokenizer)
    for flag, name in models.items():
        if name is None:
            continue
        path = Path(resolve_name(name, flag))
        if path.is_dir() and not any((path / f).is_file() for f in TOKENIZER_FILES):
            continue
        other = load_tokenizer(name, flag)
        if vocab_hash(other) != want:
            raise ValueError(f"{flag}: {name} has another tokenizer than the target ({len(other)} vs {len(tokenizer)} "
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
        raise ValueError(f"--eagle: {err}") from None


def eagle_shape(text: str) -> tuple[int, int, int]:
    """"depth:topk:total_tokens" (e.g. "6:4:16") -> a tuple of three ints >= 1."""
    parts = text.split(":")
    try:
        shape = tuple(int(x) for x in parts)
    except ValueError:
        shape = ()
    if len(shape) != 3 or min(shape) < 1:
        raise argparse.ArgumentTypeError(f"expected depth:topk:total_tokens (three ints >= 1), got {text!r}")
    return shape  # type: ignore[return-value]


def sampling_options(args: argparse.Namespace) -> tuple[Sampling, int | None]:
    """The `Sampling` of --temperature, --top-k, --top-p and the --seed; ValueError naming the flag."""
    try:
        sampling = Sampling(args.temperature, args.top_k, args.top_p)
    except ValueError as err:
        name, _, rest = str(err).partition(":")
        raise ValueError(f"--{name.replace('_', '-')}:{rest}") from None
    if args.seed is not None and args.seed < 0:
        raise ValueError(f"--seed: expected an int >= 0, got {args.seed}")
    return sampling, args.seed


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


def variant_runs(args: argparse.Namespace, runs: dict, cost: Profile | None) -> tuple[dict, dict]:
    """Static tree sizes (--tree-sizes) and SMART variants (--smart-variants) as runs of their own, in place
    of "tree" and "smart"; returns the runs and each label's make_supplier options."""
    out, options = {}, {}
    for label, (method, budget) in runs.items():
        if method == "tree":
            sizes = getattr(args, "tree_sizes", None) or [args.total_tokens]
            for n in sizes:
                name = "tree" if len(sizes) == 1 else f"tree-{n}"
                out[name], options[name] = (method, budget), {"total_tokens": n}
        elif method in ("smart", EAGLE_SMART):  # eagle-smart's cost, the head's profile, comes later
            for v in getattr(args, "smart_variants", None) or ["default"]:
                name = method if v == "default" else f"{method}[{v}]"
                out[name], options[name] = (method, budget), {"smart": harness.smart_variant(v)}
                if method == "smart":
                    options[name]["cost"] = cost
        elif method == "eagle":  # one run per tree shape
            shapes = getattr(args, "eagle_shapes", None) or [(args.depth, args.topk, args.total_tokens)]
            for d, k, n in shapes:
                name = "eagle" if len(shapes) == 1 else f"eagle-{d}x{k}x{n}"
                out[name], options[name] = (method, budget), {"eagle_shape": (d, k, n)}
        elif method == "eagle-chain":
            depths = getattr(args, "eagle_chain_depths", None) or [args.depth]
            for d in depths:
                name = "eagle-chain" if len(depths) == 1 else f"eagle-chain-{d}"
                out[name], options[name] = (method, budget), {"eagle_shape": (d, 1, d + 1)}
        else:
            out[label] = (method, budget)
    return out, options


CONTROL = "ar-control"  # `specdec bench --control`: AR run again, whose speedup over AR is the noise floor


def evaluate(args: argparse.Namespace, target_name: str, draft_name: str | None, prompt_sets: list[str],
             num_prompts: int, methods: list[str], chat: bool = False,
             stdlib_files: int | None = None) -> tuple[list[harness.MethodResult], dict]:
    """Run methods x prompt sets x batch sizes on one model pair; results carry speedup and identity vs AR."""
    if args.max_new_tokens <= 0:
        raise ValueError(f"--max-new-tokens: expected > 0, got {args.max_new_tokens}")
    sampling, seed = sampling_options(args)
    if any(b <= 0 for b in args.batch_sizes):
        raise ValueError(f"--batch-sizes: expected sizes > 0, got {args.batch_sizes}")
    if any(b < 1 for b in args.budgets):
        raise ValueError(f"--budgets: expected sizes >= 1, got {args.budgets}")
    tokenizer = load_tokenizer(target_name, "--target")
    check_tokenizers(tokenizer, {"--draft": draft_name})
    methods = ["ar"] + [m for m in methods if m != "ar" and (draft_name is not None or m not in DRAFT_METHODS)]
    datastore = None  # before the models: a wrong store fails in milliseconds
    if set(methods) & set(RETRIEVAL_METHODS):
        datastore = load_datastore(args.datastore, tokenizer, target_name, stdlib_files)
    target = load_model(target_name, dtype=args.dtype, device=args.device, what="--target")
    draft = load_model(draft_name, dtype=args.dtype, device=str(target.device), what="--draft") if draft_name else None
    eagle = (load_eagle(getattr(args, "eagle", None), target, target_name)
             if set(methods) & set(EAGLE_METHODS) else None)
    methods = [m for m in methods if eagle is not None or m not in EAGLE_METHODS]
    runs = {}  # label -> (method, retrieval budget), in the order of `methods`
    for m in methods:
        if m == "retrieval":  # one run per budget
            runs.update({m if len(args.budgets) == 1 else f"{m}-{b}": (m, b) for b in args.budgets})
        else:
            runs[m] = (m, max(args.budgets))  # retrieval-smart: the largest budget is its cap
        if m == "ar" and getattr(args, "control", False):  # an A/A run: the same AR, measured right after it
            runs[CONTROL] = ("ar", max(args.budgets))
    # retrieval-smart and prompt-lookup-smart share SMART's profile (its target parts; they draft nothing)
    # ... and ValuSpec's cost gate, when a profile is at hand (a planned method, or --profile)
    cost = (smart_profile(getattr(args, "profile", None), target, draft, args.batch_sizes)
            if set(PLANNED_METHODS) & set(methods) or getattr(args, "profile", None) else None)
    runs, options = variant_runs(args, runs, cost)
    # eagle-smart: the head's own profile (its layer and catch-up are the head's forwards; --profile is the pair's)
    eagle_smart = [label for label, (method, _) in runs.items() if method == EAGLE_SMART]
    eagle_cost = smart_profile(None, target, eagle, args.batch_sizes) if eagle_smart else None
    for label in eagle_smart:
        options[label]["cost"] = eagle_cost
    calibration = valuspec_runs(args, runs, options, tokenizer, target, draft, chat)
    wide = getattr(args, "wide_methods", None)  # methods run at batch sizes > 1 (None: all)
    results, outputs, skipped = [], {}, {}
    encoded = {}
    for ps in prompt_sets:
        tokens = harness.encode(tokenizer, harness.load_prompts(ps, num_prompts), chat)
        encoded[ps] = harness.fit(tokens, target, args.max_new_tokens)
        skipped[ps] = len(tokens) - len(encoded[ps])
    cells = [(ps, bs) for ps in prompt_sets for bs in args.batch_sizes]
    for ps, bs in tqdm(cells, desc="cells", file=sys.stderr):
        cell = []  # every method of this prompt set and batch size, measured interleaved
        for m in (m for m in runs if bs == 1 or wide is None or runs[m][0] in wide):
            method, budget = runs[m]
            supplier = harness.make_supplier(method, draft, **{"depth": args.depth, "topk": args.topk,
                                                               "datastore": datastore, "total_tokens": args.total_tokens,
                                                               "budget": budget, "cost": cost, "eagle": eagle,
                                                               **options.get(m, {})})
            filt = ValuSpecFilter(draft, calibration, cost_model=cost) if m.endswith("+valuspec") else None
            harness.run_method(target, supplier, encoded[ps][:bs], batch_size=bs, max_new_tokens=4, method=m,
                               prompt_set=ps, pad_token_id=tokenizer.pad_token_id, eos_token_id=None,
                               filter=filt, sampling=sampling, seed=seed)  # warm-up
            cell.append(harness.Run(m, supplier, filt))
        measured = harness.run_interleaved(target, cell, encoded[ps], batch_size=bs, max_new_tokens=args.max_new_tokens,
                                           pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id,
                                           prompt_set=ps, repeats=getattr(args, "repeats", 1), sampling=sampling,
                                           seed=seed)
        for run, (result, out) in zip(cell, measured):
            results.append(result)
            outputs[(run.method, ps, bs)] = out
    harness.compare_to_ar(results, outputs, identity=sampling.greedy)  # sampled outputs are draws, not AR's
    env = {**harness.environment(), "target": target_name, "draft": draft_name, "dtype": args.dtype,
           "temperature": sampling.temperature, "top_k": sampling.top_k, "top_p": sampling.top_p, "seed": seed,
           "max_new_tokens": args.max_new_tokens, "tree": {"depth": args.depth, "topk": args.topk,
                                                           "total_tokens": args.total_tokens},
           "prompts_left_out_too_long": skipped}
    if datastore is not None:
        env["retrieval"] = {"datastore": str(datastore.path), "num_tokens": datastore.num_tokens,
                            "budgets": args.budgets}
    if eagle is not None:
        env["eagle"] = {"head": getattr(args, "eagle", None) or "demo-eagle", "kind": eagle.config.kind,
                        "feature_layers": list(eagle.feature_layers), "draft_vocab": eagle.config.draft_vocab_size,
                        "runs": {m: options[m]["eagle_shape"] for m in runs if "eagle_shape" in options.get(m, {})}}
    if calibration is not None:
        env["valuspec"] = {"calibration": asdict(calibration), "scorer": draft_name}
    if cost is not None:
        env["smart"] = {"profile": asdict(cost), "variants": getattr(args, "smart_variants", None) or ["default"]}
    if eagle_cost is not None:
        env["eagle_smart"] = {"profile": asdict(eagle_cost)}
    return results, env


def valuspec_runs(args: argparse.Namespace, runs: dict, options: dict, tokenizer, target, draft,
                  chat: bool) -> Calibration | None:
    """For each label in ``args.valuspec_methods``, a "<label>+valuspec" run with the draft as scorer, tau
    calibrated (once, cached) on ``args.calibration_prompts`` at this run's max_new_tokens; the calibration."""
    methods = list(getattr(args, "valuspec_methods", None) or ())
    unknown = [m for m in methods if m not in runs]
    if unknown:
        raise ValueError(f"--valuspec-methods: {unknown} are not among this run's methods {sorted(runs)}")
    if not methods or draft is None:
        return None
    prompts = harness.fit(harness.encode(tokenizer, args.calibration_prompts, chat), target, args.max_new_tokens)
    calibration = cached_calibration(target, draft, prompts, max_new_tokens=args.max_new_tokens,
                                     window=min(DEFAULT_WINDOW, args.max_new_tokens),
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
                  f"measured {p['measured_speedup']:.2f}x by its c_T; {p['steps_drafted']} steps drafted, "
                  f"{p['steps_ar']} plain, {p['probes']} probes")
        if r.filter is not None:
            f = r.filter
            print(f"{r.method} (batch {r.batch_size}): kept {f['branch_keep_rate']:.1%} of branches and "
                  f"{f['node_keep_rate']:.1%} of nodes, AR fallbacks {f['ar_fallback_rate']:.1%}, filter "
                  f"{r.filter_share:.1%} of the time")
