"""`python -m launcher.cli`: the dfm command."""

import sys

from launcher.cli import main

sys.exit(main())
