"""End-to-end benchmark: `specdec bench` (methods x prompt sets x batch sizes x models).

    python bench/e2e.py [specdec bench options]     e.g. --batch-sizes 1 4 --num-prompts 8 --max-new-tokens 64

Defaults to the embedded demo pair on HumanEval prompts. Writes bench/out/<stamp>-e2e/ with results.json,
results.csv (device, dtype, commit, versions on every row) and plots. See `specdec bench --help`.
"""

import sys

from specdec.app.cli import main

if __name__ == "__main__":
    sys.exit(main(["bench", *sys.argv[1:]]))
