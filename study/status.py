"""``python -m study.status``: the entry point printed lines and job scripts call; the command is
:mod:`study.commands.status`."""

import sys

from study.commands.status import main

if __name__ == "__main__":
    sys.exit(main())
