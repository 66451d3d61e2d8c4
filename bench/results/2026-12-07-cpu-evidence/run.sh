#!/usr/bin/env bash
# The runs of results.txt, one after another, alone (under /work/bin/cpu-exclusive).
set -euo pipefail
cd "$(dirname "$0")"
python evid.py humaneval 1 8 8
python evid.py spec_bench 1 8 8
python evid.py humaneval 4 6 16
python evid.py spec_bench 8 6 16
python evid.py humaneval 1 6 8 smart
