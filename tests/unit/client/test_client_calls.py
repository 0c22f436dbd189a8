"""The calls as data: paths, bodies, decoding, filters, and the multi-request
steps (paging, long-polling) driven with canned answers."""

import json
import re

import pytest

from shoal.client import calls
from shoal.client.types import Controller, KeyListing, KeyValue, Member, MemberListing


def drive(steps, answer):
    """Run `steps`, answering each call with `answer(call)`; (result, calls)."""
    seen = []
    try:
        call = next(steps)
        while True:
            seen.append(call)
            call = steps.send(answer(call))
    except StopIteration as done:
        return done.value, seen


def member(name, **tags):
    return Member(name=name, node_id="00", address="127.0.0.1:7946", status="alive",
                  incarnation=1, tags=tags)  # fmt: skip


def test_a_key_is_quoted_and_fence_and_ephemeral_go_in_the_query():
    call = calls.kv_put("brokers/a b", "v", fence=4, ephemeral=True)
    assert (call.method, call.body) == ("PUT", b"v")
    assert call.path == "/v1/kv/brokers/a%20b?fence=4&ephemeral=1"
    assert calls.kv_delete("k", fence=0).path == "/v1/kv/k?fence=0"
    assert calls.kv_put("k", b"\x00").path == "/v1/kv/k"


@pytest.mark.parametrize("fence", [-1, 1.5, True, "3"])
def test_a_fence_that_is_not_an_epoch_is_refused_before_sending(fence):
    with pytest.raises(ValueError, match="fence"):
        calls.kv_put("k", "v", fence=fence)


def test_an_empty_key_is_refused_before_sending():
    with pytest.raises(ValueError, match="empty"):
        calls.kv_get("")


def test_a_key_answer_decodes_its_value_from_base64():
    body = json.dumps(
        {
            "key": "k",
            "value": None,
            "value_base64": "AAH/",
            "hlc": 9,
            "writer": "a",
            "writer_id": "ff",
            "epoch": 2,
            "ephemeral": True,
            "owner": "a",
        }
    ).encode()
    kv = calls.answer(calls.kv_get("k"), 200, "OK", body)
    assert isinstance(kv, KeyValue) and kv.value == b"\x00\x01\xff"
    assert (kv.epoch, kv.ephemeral, kv.owner) == (2, True, "a")


def test_tag_filters_match_in_full_and_a_missing_tag_never_matches():
    """Like `shoal members --tag role=w.b` and Serf's -tag."""
    web, db, bare = member("web-1", role="web"), member("db-1", role="db"), member("x")
    pick = calls.member_filter({"role": "w.b"})
    assert [m.name for m in (web, db, bare) if pick(m)] == ["web-1"]
    assert not calls.member_filter({"role": "we"})(web)  # a prefix is not a full match
    assert not calls.member_filter({"rack": ".*"})(web)
    both = calls.member_filter({"role": re.compile("web|db")}, name="(web|db)-.*")
    assert [m.name for m in (web, db, bare) if both(m)] == ["web-1", "db-1"]
    with pytest.raises(re.error):
        calls.member_filter(name="(")


def test_members_filters_the_listing_it_asks_for():
    listing = MemberListing(members=[member("a", role="web"), member("b", role="db")], index=3)
    result, sent = drive(calls.members("alive", {"role": "db"}, None), lambda call: listing)
    assert [m.name for m in result] == ["b"]
    assert [c.path for c in sent] == ["/v1/members?status=alive"]


def test_a_listing_follows_every_page_and_keeps_the_first_pages_position():
    """The oldest position: a watch from it misses nothing changed meanwhile."""
    pages = iter([
        KeyListing(items=[KeyValue(key="p/1")], next_after="p/1", index=5, run="r"),
        KeyListing(items=[KeyValue(key="p/2")], next_after=None, index=7, run="r"),
    ])  # fmt: skip
    listing, sent = drive(calls.kv_listing("p/"), lambda call: next(pages))
    assert [kv.key for kv in listing.items] == ["p/1", "p/2"]
    assert (listing.index, listing.run) == (5, "r")
    assert "after=p%2F1" in sent[1].path and "prefix=p%2F" in sent[0].path


class FakeClock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def test_waiting_for_a_controller_long_polls_until_one_is_elected():
    """With no controller yet, it polls with the agent's epoch and returns the new one."""
    answers = iter([Controller(controller=None, epoch=None), Controller(controller=None, epoch=1),
                    Controller(controller="n2", epoch=2)])  # fmt: skip
    clock = FakeClock()
    result, sent = drive(calls.wait_controller(None, 30.0, clock), lambda call: next(answers))
    assert result.controller == "n2"
    assert sent[1].path == "/v1/controller?wait=30.000" and sent[1].wait_s == 30.0
    assert sent[2].path == "/v1/controller?wait=30.000&epoch=1"


def test_waiting_past_an_epoch_ignores_the_controller_already_known():
    answers = iter([Controller(controller="n1", epoch=3), Controller(controller="n4", epoch=4)])
    result, sent = drive(calls.wait_controller(3, 30.0, FakeClock()), lambda call: next(answers))
    assert (result.controller, result.epoch, len(sent)) == ("n4", 4, 2)
    now, _ = drive(calls.wait_controller(2, 30.0, FakeClock()),
                   lambda call: Controller(controller="n1", epoch=3))  # fmt: skip
    assert now.epoch == 3  # already past: no wait


def test_waiting_for_a_controller_gives_up_at_its_deadline():
    clock = FakeClock()

    def answer(call):
        clock.now += call.wait_s  # the agent held the poll for its whole wait
        return Controller(controller=None, epoch=1)

    with pytest.raises(TimeoutError, match="within 5.0 s"):
        drive(calls.wait_controller(None, 5.0, clock), answer)
    assert clock.now == 5.0


def test_join_takes_a_list_not_one_string():
    with pytest.raises(TypeError):
        calls.join("127.0.0.1:7946")
    assert json.loads(calls.join(["a:1"]).body) == {"addrs": ["a:1"]}
