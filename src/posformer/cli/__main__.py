"""`python -m posformer.cli ...`: the same program as the `posformer` script (what torchrun launches)."""

import sys

from posformer.cli import main

sys.exit(main())
