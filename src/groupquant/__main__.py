"""``python -m groupquant [demo|formats|describe|llm]``: see :mod:`groupquant.cli`."""
import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())
