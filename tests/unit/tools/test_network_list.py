"""`network = [hosts]`: the patterns a profile may write, the one matcher the proxy and the
web tools share, and what a delegated card gets from its ancestors' lists."""

from __future__ import annotations

import pytest

from kanban.state.config_parse import parse_config
from kanban.state.errors import ConfigError
from kanban.state.network import HostList, host_key, intersect

LIST = HostList(("allowed.test", "*.pythonhosted.org", "10.0.0.5"),
                {"allowed.test": "127.0.0.1"})


@pytest.mark.parametrize("host", ["allowed.test", "ALLOWED.Test", "allowed.test.",
                                  "files.pythonhosted.org", "a.b.pythonhosted.org",
                                  "10.0.0.5", "[10.0.0.5]"])
def test_listed_hosts_pass(host: str) -> None:
    assert LIST.refusal(host) is None


@pytest.mark.parametrize("host", [
    "denied.test", "pythonhosted.org", "allowed.test.evil.test", "evil.test#allowed.test",
    "allowed.test@evil.test", "evil.test/allowed.test", "allowed.test:80", "notallowed.test",
    "127.0.0.1", "10.0.0.6", "127.1", "2130706433", "x.allowed.test", "allowed.test\r\nx",
    "evilpythonhosted.org", "", "a" * 300, "allowed.test\x00", "allowed%2etest",
])
def test_everything_else_is_refused_with_the_list_named(host: str) -> None:
    why = LIST.refusal(host)
    assert why is not None and "not in this card's network list" in why
    assert "allowed.test, *.pythonhosted.org" in why


def test_a_wildcard_never_covers_an_address() -> None:
    assert HostList(("*.0.0.1",)).refusal("127.0.0.1") is not None
    assert host_key("127.0.0.1") == "127.0.0.1" and host_key("[::1]") == "::1"
    assert host_key("evil.test#x") is None


def test_pins_are_looked_up_by_normalised_name() -> None:
    assert LIST.pinned("Allowed.Test.") == "127.0.0.1"
    assert LIST.pinned("denied.test") is None


def test_a_childs_network_is_what_every_ancestor_allows() -> None:
    assert intersect(True, ("a.test",)) == ("a.test",)
    assert intersect(("a.test",), True) == ("a.test",)
    assert intersect(False, ("a.test",)) is False and intersect(("a.test",), False) is False
    assert intersect(("a.test", "*.b.test"), ("*.test",)) == ("a.test", "*.b.test")
    got = intersect(("a.test", "*.b.test", "*.c.test"), ("*.b.test", "x.c.test", "d.test"))
    assert set(got) == {"*.b.test", "x.c.test"}  # type: ignore[arg-type]
    assert intersect(("*.deep.b.test",), ("*.b.test",)) == ("*.deep.b.test",)
    assert intersect(("a.test",), ("b.test",)) is False  # nothing in common: no network


def test_the_profile_keys_parse_normalised() -> None:
    config = parse_config({"profiles": {"p": {
        "network": ["PyPI.org", "*.PythonHosted.org", "pypi.org"],
        "network_hosts": {"Internal.Test": "10.1.2.3"}}}})
    profile = config.profile("p")
    assert profile.network == ("pypi.org", "*.pythonhosted.org")
    assert profile.network_hosts == {"internal.test": "10.1.2.3"}
    assert parse_config({"profiles": {"p": {"network": []}}}).profile("p").network is False
    assert parse_config({"profiles": {"p": {"network": False}}}).profile("p").network is False


@pytest.mark.parametrize(("value", "message"), [
    ({"network": "pypi.org"}, "must be true or false, or a list of host names"),
    ({"network": [1]}, "must be true or false, or a list of host names"),
    ({"network": ["pypi.org:443"]}, "'pypi.org:443': a port is not part of a pattern"),
    ({"network": ["*"]}, "'\\*': a pattern is a host name"),
    ({"network": ["http://pypi.org"]}, "a pattern is a host name"),
    ({"network": ["[::1]:80"]}, "a pattern is a host name"),
    ({"network": ["evil.test#x"]}, "a pattern is a host name"),
    ({"network": ["*.10.0.0.1"]}, "a wildcard cannot cover addresses"),
    ({"network": [f"h{n}.test" for n in range(300)]}, "more than 256 hosts"),
    ({"network_hosts": {"a.test": "not-an-ip"}}, "'not-an-ip' is not an IP address"),
    ({"network_hosts": {"a b": "10.0.0.1"}}, "'a b' is not a host name"),
    ({"network_hosts": ["a.test"]}, "must be a table of host name"),
])
def test_bad_entries_are_one_line_at_load(value: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message) as caught:
        parse_config({"profiles": {"p": value}})
    assert "\n" not in str(caught.value)
    assert "[profiles.p]" in str(caught.value)
