"""`python -m specdec`: the `specdec` command line (`specdec.app.cli`)."""

import sys

from .app.cli import main

sys.exit(main())
