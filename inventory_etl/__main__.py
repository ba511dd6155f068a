"""Entry point for ``python -m inventory_etl`` and ``spark-submit inventory_etl/__main__.py``."""

import sys

from inventory_etl.cli import main

if __name__ == "__main__":
    sys.exit(main())
