"""`python -m crcr.ops.cli`: the `crcr` command."""

import sys

from crcr.ops.cli import main

sys.exit(main())
