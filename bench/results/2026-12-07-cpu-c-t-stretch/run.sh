#!/usr/bin/env bash
# The runs of results.txt, one after another, alone (under /work/bin/cpu-exclusive).
set -euo pipefail
cd "$(dirname "$0")"
python stretch.py humaneval 1 8 8
python stretch.py spec_bench 1 8 8
python stretch.py humaneval 4 6 16
