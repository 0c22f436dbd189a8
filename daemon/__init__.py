"""The shoal agent process: config, CLI, API, and the driver of the cores."""

__all__: list[str] = []
