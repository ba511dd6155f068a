"""Entry point for ``python -m vacuum_jobs`` and ``spark-submit vacuum_jobs/__main__.py``."""

import sys

from vacuum_jobs.cli import main

if __name__ == "__main__":
    sys.exit(main())
