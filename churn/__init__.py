"""PySpark churn report over membership history (not built yet: see issue 6)."""

__all__: list[str] = []
