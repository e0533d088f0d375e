"""``python -m study.run``: the entry point that continue lines, rendered job scripts and requeued jobs call; the
command is :mod:`study.commands.run`."""

import sys

from study.commands.run import main

if __name__ == "__main__":
    sys.exit(main())
