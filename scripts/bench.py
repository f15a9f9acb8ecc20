#!/usr/bin/env python3
"""Benchmark the best-known kernels of a records DB against numpy (see --help)."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from autotune.cli.bench import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
