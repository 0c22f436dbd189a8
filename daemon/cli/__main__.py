"""`python -m shoal.daemon.cli`: the `shoal` command."""

from shoal.daemon.cli.app import main

main()
