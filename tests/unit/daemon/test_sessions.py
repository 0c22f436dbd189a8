"""The session table (daemon/sessions.py) and the check runner's rules
(services/checks.py, services/checkconfig.py), without an agent."""

import pytest

from shoal.daemon.sessions import SessionError, SessionTable
from shoal.kernel.errors import ConfigError
from shoal.services.checkconfig import CheckConfig, parse_checks
from shoal.services.checks import CRITICAL, PASSING, WARNING, CheckMachines, worst


def test_a_session_expires_ttl_after_its_last_renewal_and_not_before():
    table = SessionTable()
    s = table.open(2.0, "b1", (), now=0.0)
    assert table.expire_due(1.9) == []
    table.renew(s.id, 1.5)
    assert table.expire_due(2.0) == [] and table.next_expiry() == 3.5
    assert table.expire_due(3.4) == [] and table.expire_due(3.5) == [s]
    with pytest.raises(SessionError) as err:
        table.renew(s.id, 4.0)
    assert err.value.status == 404
    assert table.next_expiry() is None and table.expired == 1


def test_ten_thousand_renewing_sessions_expire_in_order():
    table = SessionTable()
    ids = [table.open(10.0, "", (), now=float(i % 7)).id for i in range(10_000)]
    for n, sid in enumerate(ids[:5000]):
        table.renew(sid, 8.0 + n % 3)
    gone = table.expire_due(16.9)
    assert {s.id for s in gone} == set(ids[5000:])
    assert len(table) == 5000 and table.next_expiry() == 18.0
    assert len(table._due) == 5000  # one entry per open session, however often renewed


@pytest.mark.parametrize("ttl", [0.0, 0.5, 3601.0])
def test_a_ttl_out_of_range_is_refused(ttl):
    with pytest.raises(SessionError, match="ttl_s must be") as err:
        SessionTable().open(ttl, "", (), 0.0)
    assert err.value.status == 400


def test_a_critical_check_ends_only_the_sessions_bound_to_it():
    table = SessionTable()
    bound = table.open(60, "", ("app",), 0.0)
    free = table.open(60, "", (), 0.0)
    assert table.bound_to("app") == [bound]
    assert [s.id for s in table.all()] == [free.id]


def test_checks_parse_with_consuls_defaults_and_refuse_what_they_should():
    (c,) = parse_checks([{"id": "web", "kind": "http", "target": "http://127.0.0.1:1/"}], False)
    assert c == CheckConfig("web", "http", "http://127.0.0.1:1/", 10.0, 5.0, 1, 1, 0.0)
    bad = [
        ([{"id": "a", "kind": "tcp", "target": "nohost"}], "ADDR:PORT"),
        ([{"id": "a", "kind": "ttl"}], "ttl_s"),
        ([{"id": "a", "kind": "ttl", "ttl_s": 5, "target": "x"}], "no target"),
        ([{"id": "a b", "kind": "ttl", "ttl_s": 5}], "id must be"),
        ([{"id": "a", "kind": "ttl", "ttl_s": 5}] * 2, "declared twice"),
        ([{"id": "a", "kind": "tcp", "target": "h:1", "timeout_s": 20, "interval_s": 10}],
         "timeout_s"),
        ([{"id": "a", "kind": "tcp", "target": "h:1", "critical_after": 0}], "critical_after"),
        ([{"id": "a", "kind": "tcp", "target": "h:1", "color": "red"}], "unknown setting"),
    ]  # fmt: skip
    for value, words in bad:
        with pytest.raises(ConfigError, match=words):
            parse_checks(value, True)


def test_thresholds_hold_a_status_until_enough_consecutive_results():
    """A flapping probe changes the check's status only past its thresholds."""
    machines = CheckMachines()
    machines.configure((CheckConfig("t", "tcp", "h:1", passing_after=2, critical_after=3),), 0.0)
    changes = []
    for result in (PASSING, PASSING, CRITICAL, CRITICAL, PASSING, CRITICAL, CRITICAL,
                   CRITICAL, WARNING):  # fmt: skip
        machines.result("t", result, "")
        changes += [e.new for e in machines.drain().events]
    assert machines.health == WARNING
    assert changes == [PASSING, CRITICAL, WARNING]
    assert worst([]) == PASSING and worst([PASSING, WARNING, PASSING]) == WARNING


def test_a_ttl_check_turns_critical_when_the_application_stops_saying_it_is_well():
    """Updated within ttl_s it stays passing; silent past it, it turns critical."""
    machines = CheckMachines()
    machines.configure((CheckConfig("app", "ttl", ttl_s=15.0),), 0.0)
    assert machines.health == CRITICAL and machines.next_deadline() == 15.0
    machines.update_ttl("app", PASSING, "", 10.0)
    machines.tick(15.0)  # the first deadline passed, but an update came since
    assert machines.health == PASSING
    machines.tick(25.0)
    assert machines.health == CRITICAL
    assert "no update within ttl_s = 15 s" in machines.checks["app"].output
    assert [e.new for e in machines.drain().events] == [PASSING, CRITICAL]
    with pytest.raises(KeyError):
        machines.update_ttl("nope", PASSING, "", 26.0)


def test_renewing_a_thousand_times_keeps_one_heap_entry():
    table = SessionTable()
    s = table.open(60.0, "", (), 0.0)
    for i in range(1000):
        table.renew(s.id, float(i))
    assert len(table._due) == 1 and table.expire_due(100.0) == []
    assert table.expire_due(1059.0) == [s]
