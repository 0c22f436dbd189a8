"""structlog set-up: JSON lines off a TTY (journald, files), key=value on one."""

from __future__ import annotations

import logging
import sys

import structlog

_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING,
           "error": logging.ERROR}  # fmt: skip


def configure(level: str = "info", fmt: str = "auto") -> None:
    """Configure structlog for the process.

    Args:
        level: debug, info, warning or error.
        fmt: json, console, or auto (console when stderr is a TTY).
    """
    as_json = fmt == "json" or (fmt == "auto" and not sys.stderr.isatty())
    renderer: structlog.typing.Processor = (
        structlog.processors.JSONRenderer()
        if as_json
        else structlog.dev.ConsoleRenderer(colors=False)
    )
    structlog.configure(
        processors=[
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(_LEVELS[level]),
        logger_factory=structlog.PrintLoggerFactory(sys.stderr),
        cache_logger_on_first_use=True,
    )


def set_level(level: str) -> None:
    """Change the level at run time (SIGHUP reload)."""
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(_LEVELS[level]))
