"""The receiver example in docs/webhooks.md, run against real deliveries: if the docs drift from
what the service sends, this fails."""

from __future__ import annotations

import http.server
import re
import ssl
import threading
import time
from pathlib import Path

from jobs import webhooks as jobs
from models.events import outbox, webhooks
from models.events.tables import WebhookDelivery
from models.store.db import atomic
from tests.webhooks_fixtures import *  # noqa: F403  (fixtures)

DOC = Path(__file__).resolve().parent.parent / "docs" / "webhooks.md"


def documented_receiver() -> dict:
    """Execute the doc's Python example as a module (its __main__ block does not run)."""
    source = re.search(r"```python\n(.*?)```", DOC.read_text(), re.S).group(1)
    namespace: dict = {"__name__": "webhook_receiver_example"}
    exec(compile(source, str(DOC), "exec"), namespace)  # noqa: S102 (our own documentation)
    return namespace


def test_the_documented_receiver_verifies_and_deduplicates_real_deliveries(alice, webhook_ca, webhook_settings,
                                                                          tmp_path):
    example = documented_receiver()
    inbox = example["open_inbox"](str(tmp_path / "inbox.db"))
    # The handler needs the secret, the endpoint needs the port: bind first, set the handler after.
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), http.server.BaseHTTPRequestHandler)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    webhook_ca[0].issue_cert("127.0.0.1").configure_cert(context)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    serving = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    try:
        url = f"https://127.0.0.1:{server.server_address[1]}/hooks"
        _endpoint, secret = webhooks.create_endpoint(alice.id, url, ["message.sent", "message.read"])
        server.RequestHandlerClass = example["make_handler"](inbox, secret)
        serving.start()
        with atomic():
            sent = outbox.emit(alice.id, "message.sent", {"recipient": "573001112233"})
            read = outbox.emit(alice.id, "message.read", {"recipient": "573001112233"})
        jobs.notify_new_events()
        _created, endpoint_ids = webhooks.replay_event(sent.public_id)  # a duplicate delivery
        jobs.start_drains(endpoint_ids)

        stored = inbox.execute("SELECT event_id, name FROM inbox").fetchall()
        assert sorted(stored) == sorted([(sent.public_id, "message.sent"), (read.public_id, "message.read")])
        deliveries = list(WebhookDelivery.select())
        assert len(deliveries) == 3
        assert {(d.status, d.last_status_code) for d in deliveries} == {("delivered", 204)}

        verify = example["verify_signature"]
        body, timestamp = b'{"event":"message.sent"}', str(int(time.time()))
        signature = webhooks.signature(secret, int(timestamp), body)
        assert verify(body, timestamp, signature, secret)
        assert not verify(body + b" ", timestamp, signature, secret)
        assert not verify(body, timestamp, signature, secret, now=time.time() + 301)
        assert not verify(body, timestamp, signature, "whsec_other")
    finally:
        if serving.is_alive():
            server.shutdown()
        server.server_close()
