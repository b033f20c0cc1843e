"""`python -m trnlab COMMAND ...`: the command line (`trnlab/cli.py`)."""

from __future__ import annotations

import sys

from trnlab.cli import main

if __name__ == "__main__":
    sys.exit(main())
