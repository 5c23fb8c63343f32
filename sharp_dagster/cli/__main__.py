"""`python -m sharp_dagster.cli ...`: the same command line as `sharp-dagster ...`."""

import sys

from sharp_dagster.cli.main import main

sys.exit(main())
