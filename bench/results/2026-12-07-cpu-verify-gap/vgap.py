"""What an 8-node tree's verification costs in the loop with and without drafting before it (batch 1).

Runs interleaved passes over the same prompts: AR; the EAGLE-3 head's 4:2:8 tree; a supplier that proposes
a fixed 8-node tree of the 4:2:8 shape with no drafting at all ("fixed"), and the same after sleeping
SLEEP ms in its propose ("fixed+sleep", the head's drafting time as idle time). Per-step verify times by
tree width (the fixed tree's rows accept little, so its contexts grow slower: the profile puts context's
part of a batch-1 verify at a few percent here).

    python vgap.py SET PASSES PROMPTS SLEEP_MS
"""
import sys
import time
from collections import defaultdict

import numpy as np
import torch

from specdec.app import harness
from specdec.app.evaluation import load_eagle
from specdec.app.models import load_model, load_tokenizer
from specdec.suppliers.base import Supplier
from specdec.tree import TreeBatch
from specdec.verify import TreeVerifier

pset, passes, n, sleep_ms = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
tok = load_tokenizer("demo-target", "--target")
target = load_model("demo-target", dtype="float32", device="cpu", what="--target")
head = load_eagle(None, target, "demo-target")
prompts = harness.fit(harness.encode(tok, harness.load_prompts(pset, n), False), target, 64)[:n]
PARENTS = [-1, 0, 0, 1, 1, 3, 5, 6]  # 8 nodes, depth 5 at most: a 4:2:8-like shape


class Fixed(Supplier):
    """A fixed 8-node tree of arbitrary tokens (siblings distinct), after `pause` seconds of sleep."""

    def __init__(self, pause: float):
        self.pause = pause

    def max_tree_size(self) -> int:
        return len(PARENTS)

    def propose(self, state):
        if self.pause:
            time.sleep(self.pause)
        root = state.root
        B = root.shape[0]
        toks = torch.stack([root] + [(root + 7 + i) % 4000 + 5 for i in range(len(PARENTS) - 1)], 1)
        par = torch.tensor(PARENTS, dtype=torch.int64).expand(B, -1).contiguous()
        return TreeBatch(toks, par, torch.full((B,), len(PARENTS), dtype=torch.int64), max_depth=5)


sups = {"ar": harness.make_supplier("ar", None),
        "eagle 4:2:8": harness.make_supplier("eagle", None, eagle=head, eagle_shape=(4, 2, 8)),
        "fixed": Fixed(0.0), f"fixed+sleep {sleep_ms:g} ms": Fixed(sleep_ms / 1e3)}
current = [None]
times = defaultdict(lambda: defaultdict(list))
verify = TreeVerifier.verify


def timed(self, tree, *args, **kwargs):
    t = time.perf_counter()
    out = verify(self, tree, *args, **kwargs)
    times[current[0]][tree.tokens.shape[1]].append(time.perf_counter() - t)
    return out


TreeVerifier.verify = timed


def go(name):
    current[0] = name
    return harness.run_method(target, sups[name], prompts, batch_size=1, max_new_tokens=64, method=name,
                              prompt_set=pset, pad_token_id=tok.pad_token_id, eos_token_id=None)[0]


for name in sups:
    go(name)
times.clear()
seconds = defaultdict(list)
proposes = defaultdict(list)
for p in range(passes):
    for name in (list(sups) if p % 2 == 0 else list(sups)[::-1]):
        r = go(name)
        seconds[name].append(r.seconds)
        proposes[name].append(r.stage_seconds["propose"])
print(f"{pset}, batch 1, {passes} passes of {n} prompts, torch {torch.__version__}")
ar = np.array(seconds["ar"])
for name in sups:
    by_width = times[name]
    cols = []
    for w in (1, 8):
        x = np.array(by_width.get(w, [])) * 1e3
        x = x[x < 5 * np.median(x)] if x.size else x  # each call's prompt step
        cols.append(f"width {w}: {np.median(x):5.2f} ms ({x.size} steps)" if x.size else f"width {w}: -")
    print(f"{name:22s} speedup {np.median(ar / np.array(seconds[name])):.3f}  propose {np.mean(proposes[name]):.3f} s  "
          + "  ".join(cols))
