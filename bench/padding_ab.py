"""SMART's padding-aware pricing on and off, over the embedded EAGLE head, beside AR and the static 4:2:8
tree: one planner per variant, every method of a cell interleaved in a rotating order (harness.run_interleaved),
best-of and paired speedups. Run alone on a quiet machine:

    python bench/padding_ab.py OUT.json [--cells humaneval:4 spec_bench:4 humaneval:8] [--repeats 5]
"""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict

from specdec.app import harness
from specdec.app.evaluation import load_eagle, smart_profile
from specdec.app.models import load_model, load_tokenizer
from specdec.records import provenance


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out")
    parser.add_argument("--cells", nargs="+", default=["humaneval:4", "spec_bench:4", "humaneval:8"])
    parser.add_argument("--prompts", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    tokenizer = load_tokenizer("demo-target")
    target = load_model("demo-target", dtype="float32", device="cpu")
    eagle = load_eagle(None, target, "demo-target")
    cells = [(c.split(":")[0], int(c.split(":")[1])) for c in args.cells]
    cost = smart_profile(None, target, eagle, sorted({1, 4, 8, 16, *(b for _, b in cells)}))
    results = []
    for prompt_set, batch in cells:
        prompts = harness.fit(harness.encode(tokenizer, harness.load_prompts(prompt_set, args.prompts), False),
                              target, 64)
        runs = [harness.Run("ar", harness.make_supplier("ar", None)),
                harness.Run("eagle-4x2x8", harness.make_supplier("eagle", None, eagle=eagle, eagle_shape=(4, 2, 8))),
                *(harness.Run(f"eagle-smart[padding_aware={int(on)}]",
                              harness.make_supplier("eagle-smart", None, cost=cost, eagle=eagle,
                                                    smart={"padding_aware": on})) for on in (False, True))]
        for run in runs:  # warm-up
            harness.run_method(target, run.supplier, prompts[:batch], batch_size=batch, max_new_tokens=4,
                               method=run.method, prompt_set=prompt_set, pad_token_id=tokenizer.pad_token_id,
                               eos_token_id=None)
        measured = harness.run_interleaved(target, runs, prompts, batch_size=batch, max_new_tokens=64,
                                           pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id,
                                           prompt_set=prompt_set, repeats=args.repeats)
        cell = [r for r, _ in measured]
        harness.compare_to_ar(cell, {(r.method, prompt_set, batch): out for r, (_, out) in zip(cell, measured)})
        for r in cell:
            print(f"{prompt_set:<11}{batch:>3} {r.method:<30}{r.speedup_vs_ar:6.3f}x paired {r.speedup_paired:6.3f}x "
                  f"accepted {r.mean_accepted_length:.2f} nodes {r.mean_tree_size:.1f} identical {r.identical_to_ar}")
        results += [asdict(r) for r in cell]
    with open(args.out, "w") as f:
        json.dump({"environment": provenance(), "results": results}, f, indent=1)


if __name__ == "__main__":
    main()
