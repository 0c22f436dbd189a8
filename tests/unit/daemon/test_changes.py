"""The agent's numbered change log (daemon/api/changes.py)."""

import asyncio

import pytest

from shoal.daemon.api.changes import ChangeLog, ResumeError

KV = frozenset({"kv"})
ALL = frozenset({"members", "controller", "kv"})


def same(x):
    return x


def drain(sub):
    out = []
    while not sub.queue.empty():
        change = sub.queue.get_nowait()
        out.append(None if change is None else change.index)
    return out


def run(coro):
    return asyncio.run(coro)


def test_a_resumed_watch_gets_every_kept_change_after_its_index_once():
    async def main():
        log = ChangeLog("r1")
        for i in range(5):
            log.append("kv", {"n": i}, same, b"app/%d" % i, 1)
        sub = log.subscribe(KV, b"app/", "r1", 2)
        log.append("kv", {"n": 5}, same, b"app/5", 1)
        log.append("kv", {"n": 6}, same, b"other/6", 1)
        log.append("members", {"n": 7}, same)
        return drain(sub)

    assert run(main()) == [3, 4, 5, 6]


def test_lines_carry_index_and_topic_and_are_rendered_once():
    calls = []

    def render(x):
        calls.append(x)
        return {"type": "put", "key": x}

    async def main():
        log = ChangeLog("r")
        a, b = log.subscribe(ALL, b"", None, None), log.subscribe(ALL, b"", None, None)
        log.append("kv", "k", render, b"k")
        return a.queue.get_nowait().line, b.queue.get_nowait().line

    one, two = run(main())
    assert one == two == b'{"index": 1, "topic": "kv", "type": "put", "key": "k"}\n'
    assert calls == ["k"]


def test_another_run_or_an_index_no_longer_kept_is_gone_and_one_ahead_is_bad():
    async def main():
        log = ChangeLog("r2", keep=3)
        for i in range(10):
            log.append("members", i, same)
        assert log.oldest == 7
        log.subscribe(ALL, b"", "r2", 7)  # resumes after 7: 8, 9, 10 are kept
        for run_, index, status in (("r1", 9, 410), ("r2", 6, 410), ("r2", 11, 400)):
            with pytest.raises(ResumeError) as err:
                log.subscribe(ALL, b"", run_, index)
            assert err.value.status == status

    run(main())


def test_kept_values_are_bounded_in_bytes_too():
    async def main():
        log = ChangeLog("r", keep=100, keep_bytes=1000)
        for i in range(10):
            log.append("kv", i, same, b"k", 300)
        return log.oldest

    assert run(main()) == 7  # 3 values of 300 bytes fit


def test_a_stream_that_overflows_is_ended_and_resumes_from_its_index():
    async def main():
        log = ChangeLog("r")
        sub = log.subscribe(ALL, b"", None, None)
        for i in range(5000):
            log.append("members", i, same)
        assert len(log) == 0  # dropped from the open streams
        got = drain(sub)
        assert got == [None]
        again = log.subscribe(ALL, b"", "r", 4990)
        return drain(again)

    assert run(main()) == list(range(4991, 5001))
