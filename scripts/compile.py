#!/usr/bin/env python3
"""Compile an ONNX model with the best-known schedules of a records DB (see --help)."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from autotune.cli.compile import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
