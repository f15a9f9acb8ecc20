#!/usr/bin/env python3
"""Tune workloads and record every measurement (see --help)."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from autotune.cli.tune import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
