#!/usr/bin/env bash
# The runs of results.txt, one after another, alone (under /work/bin/cpu-exclusive).
set -euo pipefail
cd "$(dirname "$0")"
python horizon.py humaneval 4 6 16
python horizon.py spec_bench 4 6 16
python horizon.py humaneval 1 6 8
python horizon.py spec_bench 8 4 16
python horizon.py humaneval 4 6 16 smart
