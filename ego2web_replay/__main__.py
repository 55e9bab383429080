"""``python -m ego2web_replay``: the ``ego2web-replay`` command."""

import sys

from .cli import main

sys.exit(main())
