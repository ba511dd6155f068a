"""Entry point for ``python -m lake_reports`` and ``spark-submit lake_reports/__main__.py``."""

import sys

from lake_reports.cli import main

if __name__ == "__main__":
    sys.exit(main())
