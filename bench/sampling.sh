#!/usr/bin/env bash
# Lossless sampling vs greedy with the embedded demo pair: every method at temperature 0 and at
# temperature 1 (seed 0), same prompts, batch sizes and tree settings, each run with its own AR baseline
# (speedup = method tokens/s over AR's at the same temperature, measured in the same run). Run on a
# quiet machine.
#
#   bash bench/sampling.sh [OUT]           # ~8-10 min on a quiet 2-core CPU (retrieval store and SMART
#                                          # profile already cached; building them adds minutes once)
#   QUICK=1 bash bench/sampling.sh /tmp/x  # tiny settings: the pipeline end to end in ~1 minute
#
# OUT (default bench/results/<date>-cpu-sampling) gets one <stamp>-e2e folder per temperature (results.json
# and results.csv with device, dtype, versions, commit and the sampling settings; plots) and summary.csv:
# per method and batch size, mean accepted length and speedup at temperature 0 and 1 side by side.
set -euo pipefail
OUT=${1:-bench/results/$(date +%Y-%m-%d)-cpu-sampling}
DEVICE=${DEVICE:-auto}
mkdir -p "$OUT"
read -r -a SPECDEC <<< "${SPECDEC:-specdec}"
if [[ -n "${QUICK:-}" ]]; then
  BATCHES=(1); PROMPTS=2; TOKENS=8; REPEATS=1
else
  BATCHES=(1 4); PROMPTS=8; TOKENS=64; REPEATS=3  # best of 3 per batch
fi
# The demo's tree (depth 4, top-2, 10 nodes; docs/demo-pair.md); chain depth 4.
for T in 0 1; do
  "${SPECDEC[@]}" bench --methods ar chain tree prompt-lookup smart retrieval retrieval-smart \
    --depth 4 --topk 2 --total-tokens 10 --budgets 16 --batch-sizes "${BATCHES[@]}" --num-prompts "$PROMPTS" \
    --max-new-tokens "$TOKENS" --repeats "$REPEATS" --temperature "$T" --seed 0 --device "$DEVICE" --out "$OUT"
done

python - "$OUT" <<'EOF'
"""summary.csv: the two runs' rows side by side (the newest run per temperature)."""
import csv, json, sys
from pathlib import Path

out = Path(sys.argv[1])
runs = {}
for f in sorted(out.glob("*-e2e/results.json")):
    doc = json.loads(f.read_text())
    runs[doc["environment"]["temperature"]] = (f.parent.name, doc)
(d0, r0), (d1, r1) = runs[0.0], runs[1.0]
key = lambda r: (r["method"], r["prompt_set"], r["batch_size"])
hot = {key(r): r for r in r1["results"]}
rows = []
for r in r0["results"]:
    s = hot[key(r)]
    rows.append({"method": r["method"], "prompt_set": r["prompt_set"], "batch_size": r["batch_size"],
                 "accepted_t0": round(r["mean_accepted_length"], 3), "accepted_t1": round(s["mean_accepted_length"], 3),
                 "speedup_t0": round(r["speedup_vs_ar"], 3), "speedup_t1": round(s["speedup_vs_ar"], 3),
                 "tokens_per_second_t0": round(r["tokens_per_second"], 1),
                 "tokens_per_second_t1": round(s["tokens_per_second"], 1),
                 "tree_size_t0": round(r["mean_tree_size"], 1), "tree_size_t1": round(s["mean_tree_size"], 1),
                 "identical_to_ar_t0": r["identical_to_ar"], "run_t0": d0, "run_t1": d1,
                 **{k: r0["environment"][k] for k in ("device", "commit", "torch", "transformers")},
                 "dtype": r0["environment"]["dtype"], "top_k": r1["environment"]["top_k"],
                 "top_p": r1["environment"]["top_p"], "seed": r1["environment"]["seed"]})
with open(out / "summary.csv", "w", newline="") as f:
    w = csv.DictWriter(f, fieldnames=list(rows[0]))
    w.writeheader()
    w.writerows(rows)
for r in rows:
    print(f"{r['method']:<16} b={r['batch_size']}  accepted {r['accepted_t0']:.2f} -> {r['accepted_t1']:.2f}   "
          f"speedup {r['speedup_t0']:.2f} -> {r['speedup_t1']:.2f}")
print(f"wrote {out / 'summary.csv'}")
EOF
