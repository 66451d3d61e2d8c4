#!/bin/bash
# SMART's pooled selection (the default) against the layered rule, on the embedded pair; each line alone.
set -euo pipefail
cd "$(dirname "$0")"
python capab.py humaneval 1 6 16 eagle:4:2:8 es es,selection=layered > humaneval-b1.txt 2>&1
python capab.py spec_bench 1 6 16 eagle:4:2:8 es es,selection=layered > spec_bench-b1.txt 2>&1
python capab.py humaneval 4 8 16 eagle:4:2:8 es es,selection=layered > humaneval-b4.txt 2>&1
python capab.py humaneval 4 8 16 eagle:4:2:8 es,planner=0 es,selection=layered,planner=0 > humaneval-b4-drafting.txt 2>&1
python capab_draft.py humaneval 1 6 16 tree:4:2:10 smart,planner=0 smart,selection=layered,planner=0 > draft-humaneval-b1-drafting.txt 2>&1
python capab_draft.py humaneval 4 8 16 tree:4:2:10 smart,planner=0 smart,selection=layered,planner=0 > draft-humaneval-b4-drafting.txt 2>&1
python capab_draft.py spec_bench 4 8 16 tree:4:2:10 smart,planner=0 smart,selection=layered,planner=0 > draft-spec_bench-b4-drafting.txt 2>&1
# in-loop host pieces (both rules), and the layered rule's pieces timed alone
python hostparts.py humaneval 1 3 16 > hostparts-humaneval-b1.txt 2>&1
python hostparts.py humaneval 4 4 16 > hostparts-humaneval-b4.txt 2>&1
python isolated.py humaneval 1 > isolated-humaneval-b1.txt 2>&1
