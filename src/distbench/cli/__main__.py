"""`python -m distbench.cli ...`: the `distbench` console script (cli/__init__.py)."""

import sys

from distbench.cli import main

sys.exit(main())
