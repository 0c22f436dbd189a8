"""Watches of the metadata log (daemon/metawatch.py) fed by a real MetaState,
and the client's cursor over their lines (client/metawatch.py)."""

import asyncio
import json

import pytest

from shoal.client import Compacted as ClientCompacted
from shoal.client.errors import error_for
from shoal.client.metawatch import MetaCursor
from shoal.daemon.metawatch import Compacted, MetaWatches
from shoal.metalog.state import MetaDelete, MetaPut, MetaState, NoOp


def lines(stream):
    out = []
    while not stream.queue.empty():
        line = stream.queue.get_nowait()
        out.append(None if line is None else json.loads(line))
    return out


def revisions(stream):
    return [x if x is None else x["revision"] for x in lines(stream)]


class Cluster:
    """One agent's state machine and its watches, fed as the agent feeds them."""

    def __init__(self, keep=100_000):
        self.state = MetaState()
        self.watches = MetaWatches(keep)
        self.held_from = 1
        self.watches.feed(self.state, self.held_from)

    def apply(self, *ops):
        for op in ops:
            self.state.apply(self.state.revision + 1, op)
        self.watches.feed(self.state, self.held_from)
        return self.state.revision


def run(coro):
    return asyncio.run(coro)


def test_a_watch_from_a_revision_gets_each_change_under_its_prefix_once_in_order():
    async def main():
        c = Cluster()
        c.apply(MetaPut(b"app/a", b"1"), NoOp(), MetaPut(b"other/x", b"2"),
                MetaDelete(b"app/absent"), MetaPut(b"app/b", b"3", cas=7))  # fmt: skip
        first = c.apply(MetaPut(b"app/a", b"4"))  # revision 6
        stream = c.watches.subscribe(b"app/", 1)
        c.apply(MetaDelete(b"app/a"), MetaPut(b"app/c", b"\xff"))
        return first, lines(stream)

    first, got = run(main())
    # The no-op, the other prefix, a delete of nothing and a refused cas change nothing.
    assert [x["revision"] for x in got] == [1, first, 7, 8]
    assert [[(e["type"], e["key"]) for e in x["events"]] for x in got] == [
        [("put", "app/a")],
        [("put", "app/a")],
        [("delete", "app/a")],
        [("put", "app/c")],
    ]
    put = got[1]["events"][0]
    assert (put["value"], put["create_revision"], put["mod_revision"], put["version"]) == (
        "4", 1, first, 2)  # fmt: skip
    assert got[3]["events"][0]["value"] is None and got[3]["events"][0]["value_base64"] == "/w=="


def test_a_watch_from_now_or_ahead_waits_for_its_revisions():
    async def main():
        c = Cluster()
        c.apply(MetaPut(b"k/1", b"x"))
        now = c.watches.subscribe(b"k/", None)
        ahead = c.watches.subscribe(b"k/", 4)
        c.apply(*(MetaPut(b"k/%d" % i, b"x") for i in range(2, 6)))
        return revisions(now), revisions(ahead)

    assert run(main()) == ([2, 3, 4, 5], [4, 5])


def test_below_the_kept_history_is_compacted_with_the_revision_to_list_again_from():
    async def main():
        c = Cluster(keep=3)
        c.apply(*(MetaPut(b"k", b"%d" % i) for i in range(6)))
        with pytest.raises(Compacted) as by_bound:
            c.watches.subscribe(b"", 3)
        kept = revisions(c.watches.subscribe(b"", 4))
        c.held_from = 6  # the log compacted up to 5
        c.apply(MetaPut(b"k", b"6"))
        with pytest.raises(Compacted) as by_log:
            c.watches.subscribe(b"", 5)
        after = revisions(c.watches.subscribe(b"", 6))
        return by_bound.value.floor, kept, by_log.value.floor, after

    assert run(main()) == (3, [4, 5, 6], 5, [6, 7])


def test_one_revision_changing_several_keys_is_one_line_and_is_dropped_whole():
    async def main():
        c = Cluster(keep=2)
        c.apply(MetaPut(b"a", b"1"))
        # An op that changes two keys at one revision (a transaction) records each.
        c.state.revision = 2
        c.state.keys[b"b"] = c.state.keys[b"c"] = c.state.keys[b"a"]
        c.state._changed(2, b"b", c.state.keys[b"b"])
        c.state._changed(2, b"c", c.state.keys[b"c"])
        c.watches.feed(c.state, 1)
        both = lines(c.watches.subscribe(b"", 2))
        c.apply(MetaPut(b"d", b"1"))  # three changes kept at most two: revision 2 goes whole
        return both, c.watches.floor, [x[0] for x in c.watches.history]

    both, floor, kept = run(main())
    assert [[e["key"] for e in x["events"]] for x in both] == [["b", "c"]]
    assert floor == 2 and kept == [3]


def test_a_replaced_state_ends_the_streams_behind_it_and_raises_the_floor():
    async def main():
        c = Cluster()
        c.apply(MetaPut(b"a", b"1"))
        behind = c.watches.subscribe(b"", None)
        restored = MetaState()  # a snapshot installed at revision 9
        restored.revision = 9
        c.state = restored
        c.watches.feed(restored, 1)  # the flush after the install
        c.apply(MetaPut(b"a", b"2"))
        with pytest.raises(Compacted):
            c.watches.subscribe(b"", 5)
        replayed = revisions(c.watches.subscribe(b"", 10))
        restored.revision, restored.changes = 20, None  # restored in place, at 20
        c.watches.feed(restored, 1)
        with pytest.raises(Compacted):
            c.watches.subscribe(b"", 20)
        return revisions(behind), replayed, c.watches.floor

    assert run(main()) == ([None], [10], 20)


def test_a_reader_that_falls_behind_is_ended_not_buffered_without_bound():
    async def main():
        c = Cluster()
        stream = c.watches.subscribe(b"", None)
        c.apply(*(MetaPut(b"k", b"v") for _ in range(5000)))
        return revisions(stream), len(c.watches)

    got, still_open = run(main())
    assert got == [None] and still_open == 0


def test_the_cursor_resumes_after_the_last_revision_and_drops_copies():
    cursor = MetaCursor("app/")
    assert "from" not in cursor.path()
    assert cursor.opened(b'{"type": "hello", "revision": 4, "compacted_revision": 0, "from": 5}\n')
    assert cursor.next_from == 5
    line = {
        "type": "changes",
        "revision": 5,
        "events": [{"type": "put", "key": "app/a", "revision": 5, "value_base64": "eA=="}],
    }
    got = cursor.take(json.dumps(line).encode())
    assert [(e.key, e.value) for e in got] == [("app/a", b"x")] and cursor.next_from == 6
    assert cursor.take(json.dumps(line).encode()) == []  # a copy after a reconnect
    assert cursor.take(b'{"type": "ping", "revision": 40}') == [] and cursor.next_from == 41
    assert "from=41" in cursor.path() and "watch=1" in cursor.path()
    assert not cursor.opened(b"")  # the connection ended first
    with pytest.raises(ValueError):
        MetaCursor("", 0)


def test_a_410_from_a_meta_watch_is_compacted_with_its_revision():
    exc = error_for(410, {"error": "revision 3 is compacted", "compacted_revision": 12})
    assert isinstance(exc, ClientCompacted) and exc.revision == 12 and exc.status == 410


class _Agent:
    """What the route asks of the agent: its metadata service."""

    def __init__(self, meta):
        self.meta = meta


def test_the_route_answers_410_with_the_compacted_revision_and_streams_from_its_hello():
    from shoal.daemon.api.answers import HttpError, Request, Stream
    from shoal.daemon.api.metawatch import collection_route
    from shoal.daemon.meta import MetaService

    async def main():
        service = MetaService(asyncio.get_running_loop(), lambda: None, lambda: None, 1.0)
        service.watches = MetaWatches(keep=2)
        state = MetaState()
        for i in range(1, 6):
            state.apply(i, MetaPut(b"a/%d" % i, b"v"))
        service.watches.feed(state, 1)  # first fed at revision 5: nothing before is kept
        state.apply(6, MetaPut(b"a/6", b"v"))
        service.watches.feed(state, 1)
        agent = _Agent(service)

        def ask(**query):
            query = {"prefix": ["a/"], "watch": ["1"], **{k: [v] for k, v in query.items()}}
            return collection_route(agent, Request("GET", "/v1/meta/", query, b""))

        with pytest.raises(HttpError) as gone:
            ask(**{"from": "5"})
        stream = ask(**{"from": "6"})
        assert isinstance(stream, Stream)
        hello = await anext(stream.lines)
        first = json.loads(await anext(stream.lines))
        with pytest.raises(HttpError) as bad:
            ask(**{"from": "x"})
        return gone.value, hello, first, bad.value.status

    gone, hello, first, bad = run(main())
    assert gone.status == 410 and gone.body()["compacted_revision"] == 5
    assert "list again" in gone.body()["error"]
    assert hello == {"type": "hello", "revision": 6, "compacted_revision": 5, "from": 6}
    assert first["revision"] == 6 and bad == 400
