#!/usr/bin/env bash
# EAGLE heads on the embedded demo pair: AR, the separate draft's chain and tree, the embedded EAGLE-3
# head's chain and tree (a small sweep of depth:topk:total_tokens and of chain depths) and EAGLE + ValuSpec
# (the demo draft as scorer), on HumanEval and Spec-Bench prompts at batch 1, 4, 8 and 16. Interleaved:
# every configuration runs once per round and keeps its fastest of 3 rounds (speedup = tokens/s over AR's
# in the same run); ar-control, AR run again right after AR, gives each cell's noise floor. One
# `specdec bench` per prompt set, so that each exclusive stretch stays short. Run on a quiet machine (here:
# under /work/bin/cpu-exclusive).
#
#   bash bench/eagle.sh [OUT]          # ~2 x 7 minutes on a quiet 2-core CPU
#   QUICK=1 bash bench/eagle.sh /tmp/x # tiny settings: the pipeline end to end in ~1 minute
#
# OUT (default bench/results/<date>-cpu-eagle) gets one <stamp>-e2e folder per prompt set (results.json,
# results.csv with device, dtype, versions, commit, stage seconds per run; plots) and summary.csv: per
# method, prompt set and batch size, speedup, mean accepted length and tree size, from both folders.
set -euo pipefail
OUT=${1:-bench/results/$(date +%Y-%m-%d)-cpu-eagle}
DEVICE=${DEVICE:-auto}
mkdir -p "$OUT"
read -r -a SPECDEC <<< "${SPECDEC:-specdec}"
if [[ -n "${QUICK:-}" ]]; then
  BATCHES=(1 2); PROMPTS=2; TOKENS=8; ROUNDS=1; SETS=(humaneval)
else
  # 16 prompts so that batch 16 is one full batch; 64 new tokens as in the other CPU benchmarks.
  # EAGLE_BATCHES / EAGLE_PROMPTS / EAGLE_ROUNDS / EAGLE_SETS shrink the run (the GPU check uses them).
  read -r -a BATCHES <<< "${EAGLE_BATCHES:-1 4 8 16}"; PROMPTS=${EAGLE_PROMPTS:-16}; TOKENS=64; ROUNDS=${EAGLE_ROUNDS:-3}
  read -r -a SETS <<< "${EAGLE_SETS:-humaneval spec_bench}"
fi
# EAGLE_SMART_VARIANTS: EAGLE-3 + SMART runs beside the default (`specdec bench --smart-variants`), e.g. alpha=1.
read -r -a VARIANTS <<< "default ${EAGLE_SMART_VARIANTS:-}"
# The draft's tree is the demo's (depth 4, top-2, 10 nodes; chain depth 4). EAGLE trees: depth:topk:nodes.
for SET in "${SETS[@]}"; do
  "${SPECDEC[@]}" bench --prompt-sets "$SET" --methods ar chain tree eagle eagle-chain eagle-smart --control \
    --depth 4 --topk 2 --total-tokens 10 \
    --eagle-shapes 4:2:8 5:2:10 5:4:12 6:4:16 8:4:24 --eagle-chain-depths 4 6 \
    --valuspec-methods eagle-6x4x16 --calibration-size 8 --smart-variants "${VARIANTS[@]}" \
    --batch-sizes "${BATCHES[@]}" --num-prompts "$PROMPTS" --max-new-tokens "$TOKENS" \
    --repeats "$ROUNDS" --device "$DEVICE" --out "$OUT"
done

python - "$OUT" <<'EOF'
"""summary.csv: every run of the folders' newest results per prompt set, one row each."""
import csv, json, sys
from pathlib import Path

out = Path(sys.argv[1])
newest = {}
for f in sorted(out.glob("*-e2e/results.json")):
    doc = json.loads(f.read_text())
    for ps in {r["prompt_set"] for r in doc["results"]}:
        newest[ps] = (f.parent.name, doc)
rows = []
for ps, (run, doc) in sorted(newest.items()):
    env = doc["environment"]
    for r in doc["results"]:
        if r["prompt_set"] != ps:
            continue
        stages = json.loads(r["stage_seconds"] or "{}")
        rows.append({"prompt_set": ps, "batch_size": r["batch_size"], "method": r["method"],
                     "speedup": round(r["speedup_vs_ar"], 3), "tokens_per_second": round(r["tokens_per_second"], 1),
                     "accepted": round(r["mean_accepted_length"], 3), "tree_size": round(r["mean_tree_size"], 1),
                     "identical_to_ar": r["identical_to_ar"],
                     **{f"s_{k}": round(v, 3) for k, v in stages.items()}, "run": run,
                     **{k: env[k] for k in ("device", "commit", "torch", "transformers", "dtype")}})
with open(out / "summary.csv", "w", newline="") as f:
    w = csv.DictWriter(f, fieldnames=list(rows[0]))
    w.writeheader()
    w.writerows(rows)
for ps in sorted({r["prompt_set"] for r in rows}):
    for b in sorted({r["batch_size"] for r in rows}):
        cells = [r for r in rows if (r["prompt_set"], r["batch_size"]) == (ps, b)]
        best = max((r for r in cells if r["method"] != "ar"), key=lambda r: r["speedup"], default=None)
        print(f"{ps:<11} b={b:<3} " + "  ".join(f"{r['method']} {r['speedup']:.2f}x/{r['accepted']:.2f}" for r in cells)
              + (f"   best: {best['method']}" if best else ""))
print(f"wrote {out / 'summary.csv'}")
EOF
