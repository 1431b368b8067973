"""``python -m transtune.cli``."""

import sys

from . import main

sys.exit(main())
