"""`shoal`: the command line (see `cli/app.py`); `python -m shoal.daemon.cli`
runs it too."""

from shoal.daemon.cli.app import main

__all__ = ["main"]
