"""Checks the `specdec` command line runs before any work starts, and its one-line error messages.

Every bad input is one line on stderr and exit status 2, naming the flag (not the Python parameter
behind it: `flag_message` turns the library's "parameter: ..." into "--flag: ..."), raised before a
model loads or a measurement starts: counts, devices, input files, and output paths (a folder that must
exist, a file that must not be a folder), so that nothing computed is lost to a path that cannot be
written.
"""

from __future__ import annotations

import argparse
import json
import os
import re
from pathlib import Path

from . import harness
from .methods import DRAFT_METHODS
from .models import resolve_device
from ..profiling import Profile
from ..sampling import Sampling

__all__ = ["TREE_COUNTS", "check_bench", "check_counts", "check_device", "check_filter_flags", "check_generate",
           "check_output_dir", "check_output_file", "check_profile", "eagle_shape", "flag_message", "flag_names",
           "int_list", "read_prompt_file", "sampling_options", "scorer_name"]


def flag_names(parser: argparse.ArgumentParser, args: argparse.Namespace) -> dict[str, str]:
    """dest -> option string (e.g. "total_tokens" -> "--total-tokens") of the subcommand `args` ran."""
    names: dict[str, str] = {}
    while True:
        sub = None
        for action in parser._actions:  # argparse keeps its actions here; there is no public accessor
            if action.option_strings:
                names.setdefault(action.dest, max(action.option_strings, key=len))
            elif isinstance(action, argparse._SubParsersAction):
                sub = action.choices.get(getattr(args, action.dest, None) or "")
        if sub is None:
            return names
        parser, names = sub, {}


def flag_message(message: str, flags: dict[str, str]) -> str:
    """A library message "name: ..." with the parameter replaced by its flag ("--name: ...") when `flags`
    (parameter -> flag) has one."""
    match = re.match(r"([a-z_]+):", message)
    if match is None:
        return message
    name = match.group(1)
    return flags[name] + message[match.end(1):] if name in flags else message


def check_counts(args: argparse.Namespace, minimums: dict[str, int]) -> None:
    """ValueError naming the flag for each dest in `minimums` whose value (an int, or a list of them) is
    set and below its minimum."""
    for dest, low in minimums.items():
        value = getattr(args, dest, None)
        values = value if isinstance(value, list) else [value]
        if any(v is not None and v < low for v in values):
            bound = "> 0" if low == 1 else f">= {low}"
            raise ValueError(f"--{dest.replace('_', '-')}: expected {bound}, got {value}")


def check_output_file(flag: str, path: Path) -> None:
    """`path` can be written as a file: not a folder, its folder exists and is writable."""
    if path.is_dir():
        raise ValueError(f"{flag}: {path} is a folder; expected a file path")
    parent = path.parent
    if not parent.is_dir():
        raise ValueError(f"{flag}: no folder {parent} to write {path.name} into")
    if not os.access(parent, os.W_OK):
        raise ValueError(f"{flag}: {parent} is not writable")


def check_output_dir(flag: str, path: Path) -> None:
    """`path` is a writable folder or can be created as one."""
    if path.exists() and not path.is_dir():
        raise ValueError(f"{flag}: {path} exists and is not a folder")
    existing = path
    while not existing.exists():
        existing = existing.parent
    if not existing.is_dir():
        raise ValueError(f"{flag}: cannot create {path}: {existing} is not a folder")
    if not os.access(existing, os.W_OK):
        raise ValueError(f"{flag}: cannot create or write {path}: {existing} is not writable")


def read_prompt_file(flag: str, path: Path) -> list[str]:
    """Prompts from a text file (one per non-blank line) or a .jsonl file (per line an object with a
    "prompt" string, or Spec-Bench's "turns": a list whose first item is the prompt); ValueError naming
    `flag`, the line and what is wrong, or that the file holds no prompt."""
    if not path.is_file():
        raise ValueError(f"{flag}: no file at {path}")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as err:
        raise ValueError(f"{flag}: {path} is not UTF-8 text ({err.reason})") from None
    if path.suffix != ".jsonl":
        prompts = [line for line in text.splitlines() if line.strip()]
    else:
        prompts = [_jsonl_prompt(flag, path, n, line) for n, line in enumerate(text.splitlines(), 1) if line.strip()]
    if not prompts:
        raise ValueError(f"{flag}: {path} holds no prompt (empty or blank)")
    return prompts


def _jsonl_prompt(flag: str, path: Path, n: int, line: str) -> str:
    try:
        record = json.loads(line)
    except json.JSONDecodeError as err:
        raise ValueError(f"{flag}: {path} line {n} is not JSON ({err.msg})") from None
    if not isinstance(record, dict):
        raise ValueError(f"{flag}: {path} line {n} is a JSON {type(record).__name__}, expected an object with a "
                         "'prompt' or 'turns' field")
    if "prompt" in record:
        prompt = record["prompt"]
    else:
        turns = record.get("turns")
        if not isinstance(turns, list) or not turns:
            raise ValueError(f"{flag}: {path} line {n} has no 'prompt' string and no 'turns' list (got "
                             f"{turns!r:.40})")
        prompt = turns[0]
    if not isinstance(prompt, str) or not prompt.strip():
        raise ValueError(f"{flag}: {path} line {n}: the prompt must be a non-empty string, got {prompt!r:.40}")
    return prompt


# Flags whose counts each command checks before any work (dest -> smallest valid value).
TREE_COUNTS = {"max_new_tokens": 1, "depth": 1, "topk": 1, "total_tokens": 2}


def check_profile(path: Path | None) -> None:
    """--profile read and validated now, so a bad file fails before the models load."""
    if path is not None:
        try:
            Profile.load(path)
        except ValueError as err:
            raise ValueError(f"--profile: {str(err).removeprefix('profile: ')}") from None


def eagle_shape(text: str) -> tuple[int, int, int]:
    """"depth:topk:total_tokens" (e.g. "6:4:16") -> a tuple of three ints >= 1 (an argparse type)."""
    parts = text.split(":")
    try:
        shape = tuple(int(x) for x in parts)
    except ValueError:
        shape = ()
    if len(shape) != 3 or min(shape) < 1:
        raise argparse.ArgumentTypeError(f"expected depth:topk:total_tokens (three ints >= 1), got {text!r}")
    return shape  # type: ignore[return-value]


def sampling_options(args: argparse.Namespace) -> tuple[Sampling, int | None]:
    """The `Sampling` of --temperature, --top-k, --top-p and the --seed; ValueError naming the parameter
    (`temperature`, `top_k`, `top_p`, `seed`), which `main` reports as its flag."""
    sampling = Sampling(args.temperature, args.top_k, args.top_p)
    if args.seed is not None and args.seed < 0:
        raise ValueError(f"seed: expected an int >= 0, got {args.seed}")
    return sampling, args.seed


def check_device(args: argparse.Namespace) -> None:
    """--device before anything loads: a CUDA device this torch cannot reach is one line, not a traceback."""
    if not getattr(args, "tensor_parallel", False):
        resolve_device(args.device, "--device")


def scorer_name(args: argparse.Namespace) -> str | None:
    """The model ValuSpec scores with: --scorer, else --draft, else demo-draft with the demo target."""
    return args.scorer or args.draft or ("demo-draft" if args.target == "demo-target" else None)


def check_filter_flags(args: argparse.Namespace) -> None:
    """ValuSpec's options do nothing without a filter: say so instead of ignoring them."""
    if args.valuspec is not None or args.fixed_threshold is not None:
        if scorer_name(args) is None:
            raise ValueError("--scorer: ValuSpec needs a scorer model sharing the target's tokenizer (or a --draft)")
        return
    for flag, set_ in (("--audit", args.audit), ("--scorer", args.scorer is not None),
                       ("--valuspec-unit", args.valuspec_unit is not None), ("--single-tau", args.single_tau)):
        if set_:
            raise ValueError(f"{flag}: has no effect without --valuspec or --fixed-threshold")


def check_generate(args: argparse.Namespace) -> None:
    """Everything about `generate`'s flags that needs no model, before any loads."""
    check_counts(args, {**TREE_COUNTS, "batch_size": 1, "budget": 1, "frontier": 1, "max_depth": 1})
    if not args.alpha > 0:
        raise ValueError(f"--alpha: expected > 0, got {args.alpha}")
    check_device(args)
    if args.method in DRAFT_METHODS and not args.draft:
        raise ValueError(f"--draft: method {args.method!r} needs a draft model")


def check_bench(args: argparse.Namespace) -> str | None:
    """`bench`'s flags before any model loads; returns the draft's name (None: no draft)."""
    check_counts(args, {**TREE_COUNTS, "num_prompts": 1, "batch_sizes": 1, "repeats": 1, "budgets": 1,
                        "tree_sizes": 2, "calibration_size": 1})
    check_output_dir("--out", args.out)
    check_device(args)
    for variant in args.smart_variants:
        harness.smart_variant(variant)
    check_profile(args.profile)
    draft = args.draft or ("demo-draft" if args.target == "demo-target" else None)
    if args.valuspec_methods and draft is None:
        raise ValueError("--valuspec-methods: ValuSpec scores with the draft; give --draft")
    return draft

def int_list(text: str) -> list[int]:
    """argparse type: "1,2,4" -> [1, 2, 4]."""
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None
