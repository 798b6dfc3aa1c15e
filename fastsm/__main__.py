"""``python -m fastsm``: the commands of :mod:`fastsm.cli`."""

import sys

from fastsm.cli import main

if __name__ == "__main__":
    sys.exit(main())
