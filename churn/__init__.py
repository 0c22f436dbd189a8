"""The PySpark churn report over every node's membership history: the job
(`shoal churn`, or spark-submit of job.py), its transforms, importers of
foreign traces, and the HTML report (docs/churn.md)."""

__all__: list[str] = []
