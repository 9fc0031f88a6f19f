"""Which addresses and URLs the webhook SSRF guard accepts."""

from __future__ import annotations

import ipaddress

import pytest

from models.events import ssrf

REFUSED = [
    "10.0.0.1", "172.16.5.4", "192.168.1.1",  # private
    "127.0.0.1", "127.255.255.254", "::1",  # loopback
    "169.254.169.254", "fe80::1",  # link-local (cloud metadata lives here)
    "100.64.0.1", "100.127.255.254",  # CGNAT shared space
    "0.0.0.0", "0.1.2.3", "::",  # unspecified / "this network"
    "224.0.0.1", "239.255.255.250", "ff02::1",  # multicast
    "240.0.0.1", "255.255.255.255",  # reserved, broadcast
    "192.0.2.10", "198.51.100.1", "203.0.113.9", "2001:db8::1",  # documentation
    "198.18.0.1",  # benchmarking
    "fc00::1", "fd12:3456::1",  # unique local
    "::ffff:127.0.0.1", "::ffff:10.0.0.1",  # IPv4-mapped
    "2002:0a00:0001::1",  # 6to4 wrapping 10.0.0.1
    "64:ff9b::a9fe:a9fe",  # NAT64 wrapping 169.254.169.254
]
ACCEPTED = ["8.8.8.8", "1.1.1.1", "203.0.114.7", "93.184.216.34", "2606:4700:4700::1111", "2a00:1450:4001::200e"]


def test_non_global_addresses_are_refused():
    wrongly_accepted = [value for value in REFUSED if ssrf.is_public(ipaddress.ip_address(value))]
    assert wrongly_accepted == []


def test_global_unicast_addresses_are_accepted():
    wrongly_refused = [value for value in ACCEPTED if not ssrf.is_public(ipaddress.ip_address(value))]
    assert wrongly_refused == []


def test_a_name_is_refused_when_it_resolves_inward():
    with pytest.raises(ssrf.UnsafeTarget, match="non-public address"):
        ssrf.vet(ssrf.parse_target("https://localhost/hook"), allow_private=False)
    assert ssrf.vet(ssrf.parse_target("https://localhost/hook"), allow_private=True)


def test_ip_literals_are_not_resolved():
    assert ssrf.vet(ssrf.parse_target("https://8.8.8.8/x"), allow_private=False) == [
        ipaddress.ip_address("8.8.8.8")]
    with pytest.raises(ssrf.UnsafeTarget):
        ssrf.vet(ssrf.parse_target("https://[::ffff:7f00:1]/x"), allow_private=False)


@pytest.mark.parametrize(("url", "message"), [
    ("http://example.com/", "https://"),
    ("https://user:secret@example.com/", "credentials"),
    ("https:///path", "no host"),
    ("https://example.com:0/", "invalid port"),
    ("https://example.com:70000/", "invalid port"),
])
def test_unusable_urls_are_refused(url, message):
    with pytest.raises(ssrf.UnsafeTarget, match=message):
        ssrf.parse_target(url)


def test_a_target_keeps_its_path_query_and_host_header():
    target = ssrf.parse_target("https://Hooks.Example.com:8443/in/bound?tenant=7")
    assert (target.hostname, target.port, target.path) == ("hooks.example.com", 8443, "/in/bound?tenant=7")
    assert target.host_header == "hooks.example.com:8443"
    assert ssrf.parse_target("https://[2606:4700::1]/").host_header == "[2606:4700::1]"
    assert ssrf.parse_target("https://example.com").path == "/"


def test_an_internationalized_host_travels_as_ascii():
    target = ssrf.parse_target("https://Bücher.example/haken")
    assert (target.hostname, target.host_header) == ("xn--bcher-kva.example", "xn--bcher-kva.example")
    with pytest.raises(ssrf.UnsafeTarget, match="not a valid name"):
        ssrf.parse_target("https://" + "a" * 64 + ".example/")
