"""A session's renewal on the connection it kept open, which the agent
closed as it restarted, is sent again at once on a new one (client/
session.py, `Session._renew`): no retry delay spent of the TTL just after
the agent is back."""

from __future__ import annotations

import pytest

from shoal.client import Client, Unavailable
from tests.unit.client.test_client_transport import ScriptedServer, json_reply

BRIEF = {"id": "s1", "ttl_s": 300, "expires_in_s": 300}


def test_a_renewal_on_a_connection_the_agent_closed_goes_again_on_a_new_one():
    # The scripted server closes every connection after its answer, as an
    # agent that restarted between two renewals did.
    server = ScriptedServer([json_reply(200, BRIEF)] * 3)
    try:
        session = Client(server.addr, token="").session(ttl=300)  # its thread stays idle
        session._renew()  # a new connection, kept open
        session._renew()  # the kept one is closed: the renewal goes on a new one
        assert server.requests == ["POST /v1/session HTTP/1.1",
                                   "PUT /v1/session/s1/renew HTTP/1.1",
                                   "PUT /v1/session/s1/renew HTTP/1.1"]  # fmt: skip
        assert not session.lost
    finally:
        server.close()


def test_a_renewal_nobody_answers_on_a_new_connection_still_fails():
    server = ScriptedServer([json_reply(200, BRIEF), json_reply(200, BRIEF)])
    session = Client(server.addr, token="").session(ttl=300)
    session._renew()
    server.close()  # the agent is down: nothing listens
    with pytest.raises(Unavailable, match="cannot reach the agent"):
        session._renew()
