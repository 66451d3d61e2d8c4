"""What one EAGLE draft layer costs next to a target step and a separate draft model's layer, on the
embedded demo pair and head (fp32, the device's fast path), at a few batch sizes.

    python bench/eagle_costs.py [--batch-sizes 1 4 16] [--context 256] [--repeats 30] [--out DIR]

Times (median and interquartile range of `--repeats`, after warm-up), every row with the same context:
target forward of 1 node (a plain decoding step) and of 16 nodes (a verification), the separate draft's
forward of one 4-node frontier layer, the head's forward of one 4-node frontier layer and its catch-up
over 4 pairs, and a whole EagleSupplier.propose (catch-up, 5 frontier layers, the selection) of the
demo's 16-node tree. Writes eagle_costs.json (device, versions, commit) to --out.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import torch

import specdec
from specdec.attention import install, prefill, tree_forward
from specdec.app.models import load_model
from specdec.records import provenance
from specdec.state import DecodeState
from specdec.suppliers.base import root_only
from specdec.suppliers.draft import DraftRunner
from specdec.suppliers.eagle import EagleRunner
from specdec.tree import TreeBatch
from specdec.verify import PromptBlock


def timed(fn, repeats: int) -> dict:
    fn()
    fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    q1, med, q3 = np.percentile(times, [25, 50, 75])
    return {"median_ms": round(med * 1e3, 4), "iqr_ms": round((q3 - q1) * 1e3, 4)}


def star(B: int, n: int, device) -> TreeBatch:
    parents = torch.tensor([-1] + [0] * (n - 1), device=device).expand(B, n).contiguous()
    tokens = torch.arange(5, 5 + n, device=device).expand(B, n).contiguous()
    return TreeBatch(tokens, parents, torch.full((B,), n, device=device), max_depth=1)


@torch.inference_mode()
def measure(target, draft, head, B: int, context: int, repeats: int) -> dict:
    device = target.device
    ids = torch.randint(3, 4096, (B, context), generator=torch.Generator().manual_seed(B), dtype=torch.int64).to(device)
    start = torch.zeros(B, dtype=torch.int64, device=device)
    state = DecodeState.begin(ids, start, max_new_tokens=64, capacity=context + 400, eos_token_ids=[], pad_token_id=0)
    verifier = specdec.TreeVerifier(target)
    verifier.request_features(head.feature_layers)
    cache = verifier.new_cache(B, state.capacity)
    acc = verifier.verify(root_only(state.root), cache, prompt=PromptBlock(ids[:, :-1], start))
    runner = EagleRunner(head)
    runner.attach(target)
    runner.start(state, region=64)
    runner.commit(acc)
    runner.catch_up()  # the head has read the prompt
    out = {"batch_size": B, "context": context}

    def target_forward(n: int):
        tree = star(B, n, device)
        tree_forward(target, cache, tree.tokens, tree.positions(cache.positions()), tree.ancestor_mask)
        cache.rollback()

    out["target_1_node"] = timed(lambda: target_forward(1), repeats)
    out["target_16_nodes"] = timed(lambda: target_forward(16), repeats)
    frontier = torch.arange(5, 9, device=device).expand(B, 4).contiguous()

    def head_layer():
        runner.begin_tree(4, 1)
        runner.forward_layer(frontier, None)
        runner.cache.rollback()

    out["head_layer_4_nodes"] = timed(head_layer, repeats)
    chunk = (torch.arange(5, 9, device=device).expand(B, 4).contiguous(), acc.features[:, :1].expand(B, 4, -1),
             torch.zeros(B, dtype=torch.int64, device=device), torch.full((B,), 4, device=device))

    def head_catch_up():
        runner._chunks = [chunk]  # four pending pairs, as after a step that accepted three
        runner.backlog = np.full(B, 4, dtype=np.int64)
        runner.catch_up()
        runner.cache.length -= 4  # forget them again: the cache keeps its length across repeats
        runner.cache.host_length -= 4

    out["head_catch_up_4_pairs"] = timed(head_catch_up, repeats)
    install(draft, "draft")
    drunner = DraftRunner(draft)
    dcache = specdec.TreeCache.for_model(draft, B, state.capacity + 64)
    prefill(draft, dcache, ids, start)
    drunner.cache, drunner._root_pos = dcache, dcache.positions() - 1

    def draft_layer():
        drunner.begin_tree(4, 1)
        drunner.forward_layer(frontier, None)
        dcache.rollback()

    out["draft_layer_4_nodes"] = timed(draft_layer, repeats)
    supplier = specdec.EagleSupplier(head, depth=6, topk=4, total_tokens=16)
    supplier.runner = runner

    def propose():
        runner._chunks = [chunk]
        runner.backlog = np.full(B, 4, dtype=np.int64)
        supplier.propose(state)
        runner.cache.rollback()
        runner.cache.length -= 4
        runner.cache.host_length -= 4

    out["eagle_propose_16_nodes"] = timed(propose, repeats)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 4, 16])
    parser.add_argument("--context", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--out", type=Path, default=Path("bench/out"))
    args = parser.parse_args()
    target = load_model("demo-target", device=args.device)
    draft = load_model("demo-draft", device=str(target.device))
    head = specdec.EagleHead.from_pretrained(specdec.app.models.resolve_name("demo-eagle"), target)
    rows = [measure(target, draft, head, B, args.context, args.repeats) for B in args.batch_sizes]
    for r in rows:
        print(f"batch {r['batch_size']:>2}: " + ", ".join(f"{k} {v['median_ms']:.3f} ms" for k, v in r.items()
                                                          if isinstance(v, dict)))
    args.out.mkdir(parents=True, exist_ok=True)
    doc = {"environment": {**provenance(), "dtype": "float32", "target": "demo-target", "draft": "demo-draft",
                           "head": "demo-eagle"}, "rows": rows}
    (args.out / "eagle_costs.json").write_text(json.dumps(doc, indent=1))
    print(f"wrote {args.out / 'eagle_costs.json'}")


if __name__ == "__main__":
    main()
