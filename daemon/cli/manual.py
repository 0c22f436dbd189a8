"""`shoal completion bash|zsh` and `shoal man`: both made from the argparse
parser itself, so they never drift from the commands.

- Completion scripts come from `shtab` (a runtime dependency: pure Python,
  no dependencies of its own, one 62 KB module), made when asked.
- The manual page is `docs/shoal.1`, made by argparse-manpage (a test
  dependency: it ships as a source package only) and checked by
  tests/integration/test_cli_more.py, which rewrites it and fails when it
  was stale. It is installed as package data; `shoal man` prints it.

Both are made with the environment's defaults set aside ($SHOAL_API,
$SHOAL_API_TOKEN_FILE) and argparse's width fixed at 80 columns ($COLUMNS),
so that the text is the same on every machine and terminal.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from shoal.kernel.errors import ConfigError

SHELLS = ("bash", "zsh")
MAN_PAGE = "docs/shoal.1"
_ENV_DEFAULTS = ("SHOAL_API", "SHOAL_API_TOKEN_FILE")


def add_parsers(sub: Any) -> None:
    """Add `completion` and `man` to the CLI's subcommands."""
    completion = sub.add_parser("completion", help="print the shell completion script for "
                                "bash or zsh")  # fmt: skip
    completion.add_argument("shell", choices=SHELLS)
    sub.add_parser("man", help="print the manual page (roff: shoal man | man -l -)")


@contextmanager
def _plain_defaults() -> Iterator[None]:
    saved = {k: os.environ.pop(k) for k in (*_ENV_DEFAULTS, "COLUMNS") if k in os.environ}
    os.environ["COLUMNS"] = "80"
    try:
        yield
    finally:
        del os.environ["COLUMNS"]
        os.environ.update(saved)


def completion_script(shell: str, parser_of: Callable[[], argparse.ArgumentParser]) -> str:
    """The completion script for `shell` (bash or zsh)."""
    import shtab

    with _plain_defaults():
        script: str = shtab.complete(parser_of(), shell=shell)
    return script


def manual_page(parser_of: Callable[[], argparse.ArgumentParser]) -> str:
    """The manual page, roff (needs argparse-manpage: `pip install 'shoal[test]'`)."""
    from argparse_manpage.manpage import Manpage  # type: ignore[import-untyped, unused-ignore]

    from shoal import __version__

    with _plain_defaults():
        parser = parser_of()
        # `_data` is how argparse-manpage's own command line passes these.
        page = Manpage(parser, _data={
            "project_name": "shoal", "version": __version__, "manual_title": "shoal manual",
            "manual_section": "1", "date": f"shoal {__version__}",
            "url": "docs/ beside the source, or /usr/share/doc/shoal",
            "description": "cluster membership for machines on a LAN: discovery, SWIM gossip, "
                           "a controller lease, replicated metadata, sessions, user events and "
                           "queries",
        })  # fmt: skip
        return str(page)


def completion_command(args: argparse.Namespace,
                       parser_of: Callable[[], argparse.ArgumentParser]) -> int:  # fmt: skip
    """`shoal completion SHELL`."""
    try:
        script = completion_script(args.shell, parser_of)
    except ImportError:
        raise ConfigError("completion needs shtab (pip install shtab)") from None
    sys.stdout.write(script)
    return 0


def man_command() -> int:
    """`shoal man`: the installed manual page."""
    from importlib.resources import files

    try:
        text = files("shoal").joinpath(MAN_PAGE).read_text()
    except (FileNotFoundError, NotADirectoryError):
        raise ConfigError(f"the manual page ({MAN_PAGE}) is not installed with this shoal") \
            from None  # fmt: skip
    sys.stdout.write(text)
    return 0
