#!/usr/bin/env python3
"""Check, repair, export, import and merge tuning databases (see --help)."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from autotune.cli.db import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
