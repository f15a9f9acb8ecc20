"""``python -m autotune``: the ``autotune`` command (see ``autotune --help``)."""

import sys

from autotune.cli.main import main

if __name__ == "__main__":
    sys.exit(main())
