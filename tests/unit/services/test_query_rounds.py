"""A query round (services/queries.py), with explicit `now`: it names every
member it expected, and what became of each."""

import re

from shoal.membership.member import MemberState, MemberView
from shoal.services.queries import QueryReply, QueryRequest, QueryRound


def view(name: str, state: MemberState, **tags: str) -> MemberView:
    return MemberView(name, name.encode(), ("127.0.0.1", 7946), tuple(sorted(tags.items())), 1,
                      state)  # fmt: skip


def test_a_query_names_who_answered_who_stayed_silent_and_who_failed_meanwhile():
    """The result lists each expected member, answered or not."""
    members = [view("a", MemberState.ALIVE, role="web"), view("b", MemberState.SUSPECT, role="web"),
               view("c", MemberState.ALIVE, role="web"), view("d", MemberState.DEAD, role="web"),
               view("e", MemberState.ALIVE, role="db")]  # fmt: skip
    request = QueryRequest(7, "uptime", b"", 2000)
    query = QueryRound(request, members, None, {"role": re.compile("^web$")}, 10.0)
    assert sorted(query.expected) == ["a", "b", "c"] and query.deadline_at == 12.0
    query.answered("a", QueryReply(7, "answered", b"up 3 days", ""))
    query.answered("e", QueryReply(7, "answered", b"not asked", ""))  # not expected: ignored
    assert not query.complete
    out = query.outcome({"a": MemberState.ALIVE, "b": MemberState.DEAD,
                         "c": MemberState.ALIVE}, 12.0)  # fmt: skip
    assert out["expected"] == 3 and out["answered"] == 1 and not out["complete"]
    assert out["members"]["a"]["answer"] == "up 3 days"
    assert out["members"]["b"] == {"status": "failed"}
    assert out["members"]["c"] == {"status": "silent"}
    assert out["duration_s"] == 2.0 and out["id"] == "0000000000000007"
