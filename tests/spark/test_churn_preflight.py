"""`shoal churn` refuses what it cannot run before Spark starts: one line,
exit 2, nothing left behind."""

from __future__ import annotations

import importlib.util

import pytest

from shoal.churn import job

pytestmark = pytest.mark.spark


def test_a_missing_path_is_one_line_and_exit_2_before_spark(tmp_path, capsys):
    """No Spark, no traceback, no output folder: the path named as given."""
    out = tmp_path / "report"
    code = job.main(["--history", str(tmp_path / "nowhere" / "*.jsonl"), "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 2
    assert err == f"shoal churn: --history: no such file or directory: {tmp_path}/nowhere/*.jsonl\n"
    assert not out.exists()


def test_without_the_churn_extra_the_hint_names_it(tmp_path, capsys, monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "pyspark" else real(name, *a)
    )
    code = job.main(["--history", str(tmp_path), "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert code == 2
    assert err == "shoal churn: the churn report needs pyspark: pip install 'shoal[churn]'\n"


@pytest.mark.parametrize("flags, message", [
    (["--since", "yesterday"], "not a time: 'yesterday'"),
    (["--flap-window", "0h"], "not a positive duration"),
    (["--columns", "node=a"], "--columns: only with --format intervals"),
    (["--top", "0"], "--top: expected a positive number"),
])  # fmt: skip
def test_bad_flags_are_refused_before_spark(tmp_path, capsys, flags, message):
    code = job.main(["--history", str(tmp_path), "--out", str(tmp_path / "out"), *flags])
    assert code == 2 and message in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_a_failed_run_leaves_no_empty_output_folder(spark, tmp_path, capsys):
    """An input with no usable row fails after Spark started: the folder
    this run created is gone again, and the bad rows were said on stderr."""
    bad = tmp_path / "bad.csv"
    bad.write_text("garbage\nmore garbage\n")
    out = tmp_path / "out"
    with pytest.raises(job.UsageError, match="no usable rows"):
        job.run(job.parse_args(["--history", str(bad), "--out", str(out),
                                "--format", "events-csv"]))  # fmt: skip
    assert not out.exists()
    assert "shoal churn: 2 bad lines skipped" in capsys.readouterr().err
