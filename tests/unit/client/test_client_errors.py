"""Refusals become one exception class per cause, carrying what the agent said."""

import pytest

from shoal.client import calls
from shoal.client.errors import (
    BadRequest,
    Busy,
    Conflict,
    Gone,
    IncompatibleAgent,
    NotFound,
    ShoalError,
    TooLarge,
    Unauthorized,
    Unavailable,
    error_for,
)


@pytest.mark.parametrize("status,cls", [
    (400, BadRequest), (401, Unauthorized), (404, NotFound), (409, Conflict), (410, Gone),
    (503, Unavailable), (413, TooLarge), (429, Busy), (500, ShoalError), (418, ShoalError),
])  # fmt: skip
def test_each_status_has_its_class_and_keeps_the_agents_words(status, cls):
    """The agent's `error` text is the message; the status is kept."""
    exc = error_for(status, {"error": "because"}, "Reason")
    assert type(exc) is cls and isinstance(exc, ShoalError)
    assert (str(exc), exc.message, exc.status) == ("because", "because", status)


def test_a_fence_refusal_names_the_fence_and_the_epoch_that_outranks_it():
    """A 409 from a fenced write carries `.fence` and `.epoch`."""
    exc = error_for(409, {"error": "overtaken", "fence": 3, "epoch": 5})
    assert isinstance(exc, Conflict) and (exc.fence, exc.epoch) == (3, 5)


def test_a_gone_watch_carries_the_agents_run_and_index():
    exc = error_for(410, {"error": "restarted", "run": "r2", "index": 7})
    assert isinstance(exc, Gone) and (exc.run, exc.index) == ("r2", 7)


def test_a_body_without_an_error_field_falls_back_to_the_status_line():
    assert str(error_for(500, None, "Internal Server Error")) == "500 Internal Server Error"
    assert error_for(409, ["not", "a", "dict"]).fence is None


def test_an_agent_without_the_watch_endpoint_is_incompatible_not_not_found():
    """404/405 on /v1/watch means an older agent, and the error says what is missing."""
    call = calls.Call("GET", "/v1/watch?topics=kv", calls._raw, needs="/v1/watch")
    with pytest.raises(IncompatibleAgent, match="/v1/watch"):
        calls.answer(call, 404, "Not Found", b'{"error": "no GET /v1/watch"}')


def test_an_answer_that_does_not_parse_is_incompatible():
    with pytest.raises(IncompatibleAgent, match="unreadable"):
        calls.answer(calls.controller(), 200, "OK", b"<html>")
    with pytest.raises(IncompatibleAgent):
        calls.answer(calls.controller(), 200, "OK", b'{"controller": 5, "epoch": 1}')


def test_no_answer_at_all_is_unavailable_and_names_the_agent():
    exc = calls.unreachable("http://127.0.0.1:1", ConnectionRefusedError(111, "Connection refused"))
    assert isinstance(exc, Unavailable) and exc.status is None
    assert str(exc) == "cannot reach the agent at http://127.0.0.1:1: Connection refused"
