"""`python -m trnlab.nki COMMAND ...`: run unmodified NKI scripts and tests on trnlab (`trnlab/nki/cli.py`)."""

from __future__ import annotations

import sys

from trnlab.nki.cli import main

if __name__ == "__main__":
    sys.exit(main())
