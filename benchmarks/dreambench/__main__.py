"""``python benchmarks/dreambench [--quick] ...``: see README.md beside this file, or ``--help``."""

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parents[1]), str(HERE.parent)]  # the repository (dream_assets), and benchmarks/

from dreambench.cli import main  # noqa: E402

sys.exit(main())
