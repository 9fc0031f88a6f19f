"""The delivery client against real HTTPS receivers: connections kept while they can carry another
POST and given up when not, answers read up to their limit whatever their framing."""

from __future__ import annotations

import ipaddress

import orjson
import pytest

from models.events import ssrf, webhooks
from models.events.delivery.client import (
    MAX_POOLS,
    MAX_RESPONSE_READ,
    DeliveryClient,
    delivery_client,
    post_signed,
    vetted_addresses,
)
from tests.webhooks_fixtures import *  # noqa: F403  (fixtures)
from tests.webhooks_fixtures import Reply, verify

SECRET = "whsec_client_test"


def post(server, number: int):
    target = ssrf.parse_target(server.url())
    body = orjson.dumps({"event": "message.sent", "n": number})
    return post_signed(delivery_client(), target, vetted_addresses(target), SECRET, f"evt_{number}",
                       "message.sent", body)


def replying(*replies: Reply):
    answers = iter(replies)
    return lambda request: next(answers)


def test_consecutive_posts_share_one_connection_and_each_arrives_signed(make_receiver):
    server = make_receiver(respond=replying(Reply(200, b"ok"), Reply(202, b"queued"),
                                            Reply(503, b"busy", {"Retry-After": "7"}), Reply(200, b"ok"),
                                            Reply(204, b"")))
    responses = [post(server, number) for number in range(5)]

    assert [(r.status_code, r.excerpt, r.error) for r in responses] == [
        (200, "ok", None), (202, "queued", None), (503, "busy", "HTTP 503"), (200, "ok", None), (204, None, None)]
    assert responses[2].retry_after == 7
    received = server.wait_for(5)
    assert [orjson.loads(request.body)["n"] for request in received] == [0, 1, 2, 3, 4]
    assert all(verify(request, SECRET) for request in received)
    assert len({request.peer_port for request in received}) == 1


@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
def test_an_answer_longer_than_the_read_limit_is_cut_and_its_connection_given_up(make_receiver, chunked):
    long = b"x" * (3 * MAX_RESPONSE_READ)
    short = Reply(200, b"fine", chunked=chunked)
    # The long answers come once on a connection already open, once on a connection's first POST.
    server = make_receiver(respond=replying(short, Reply(200, long, chunked=chunked), short,
                                            Reply(500, long, chunked=chunked), short))
    responses = [post(server, number) for number in range(5)]

    assert [(r.status_code, r.excerpt) for r in responses] == [
        (200, "fine"), (200, "x" * webhooks.EXCERPT_BYTES), (200, "fine"), (500, "x" * webhooks.EXCERPT_BYTES),
        (200, "fine")]
    assert responses[3].error == "HTTP 500"
    ports = [request.peer_port for request in server.wait_for(5)]
    # The connection that carried a long answer carries nothing more; the others are kept.
    assert ports[1] == ports[0] and ports[2] != ports[1] and ports[3] == ports[2] and ports[4] != ports[3]


def test_a_chunked_answer_read_to_its_end_keeps_the_connection(make_receiver):
    body = b"accepted, " * 250  # several chunks
    server = make_receiver(respond=lambda request: Reply(200, body, chunked=True))
    responses = [post(server, number) for number in range(3)]

    assert {(r.status_code, r.excerpt) for r in responses} == {(200, body[:webhooks.EXCERPT_BYTES].decode())}
    assert len({request.peer_port for request in server.wait_for(3)}) == 1


def test_a_receiver_that_closes_without_answering_is_a_failed_attempt(make_receiver):
    server = make_receiver(respond=replying(Reply(200, b"ok"), Reply(drop=True), Reply(200, b"ok")))
    first, dropped, after = (post(server, number) for number in range(3))

    assert first.ok and after.ok
    assert dropped.status_code is None and dropped.unreachable
    assert dropped.error == "connection failed: Remote end closed connection without response"


def test_the_pools_of_the_least_recent_receivers_are_closed_and_come_back_when_needed(make_receiver, webhook_ca):
    server = make_receiver()
    target = ssrf.parse_target(server.url())
    address = vetted_addresses(target)[0]
    client = DeliveryClient(webhook_ca[1])
    assert client.post(target, [address], b"{}", {}).ok
    first = client._pool(address, target)
    others = [client._pool(ipaddress.ip_address(f"127.0.{n // 250}.{n % 250 + 2}"), target)
              for n in range(MAX_POOLS)]

    assert first.pool is None and all(pool.pool is not None for pool in others)  # urllib3: None once closed
    assert client.post(target, [address], b"{}", {}).ok
    assert client._pool(address, target) is not first
