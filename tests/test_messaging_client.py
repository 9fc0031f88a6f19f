"""GraphClient against the platform simulator over real HTTP; the error split; payload shapes."""

from __future__ import annotations

import gzip
import json
import socket
import threading
import time

import pytest
import trustme

from messaging import payloads
from messaging.client import GraphClient, template_from_graph, template_variable_count
from messaging.errors import (
    PermanentPlatformError,
    PlatformUnavailableError,
    RetryablePlatformError,
    ThrottledError,
    error_from_response,
)
from messaging.simulator.records import DEFAULT_WABA_ID
from messaging.simulator.server import Simulator
from tests.webhooks_fixtures import Receiver, Reply

APP_SECRET = "app-secret"


@pytest.fixture(scope="module")
def sim():
    simulator = Simulator(mps=1000)
    simulator.start()
    yield simulator
    simulator.stop()


@pytest.fixture
def graph(sim):
    with GraphClient(sim.base_url, app_id="app", app_secret=APP_SECRET, timeout=(1, 2)) as client:
        yield client


@pytest.fixture
def number(sim, graph):
    """A freshly onboarded number: (phone_number_id, token)."""
    signup = sim.signup()
    return signup["phone_number_id"], graph.exchange_code(signup["code"])


def test_send_message_returns_the_wamid_and_the_platform_records_the_send(sim, graph, number):
    phone_number_id, token = number
    payload = payloads.template_message(
        "+52 1 555 123 4567", "payment_reminder", "es", ["Ana", "$150.00"], callback_data="rcp_1"
    )

    wamid = graph.send_message(phone_number_id, token, payload)

    assert wamid.startswith("wamid.")
    record = next(item for item in sim.sent() if item["wamid"] == wamid)
    assert record["to"] == "5215551234567"
    assert record["template"] == "payment_reminder"
    assert record["biz_opaque_callback_data"] == "rcp_1"
    assert record["phone_number_id"] == phone_number_id


def test_exchange_code_gives_a_token_for_its_own_number_only(sim, graph, number):
    phone_number_id, token = number
    other_id = sim.signup()["phone_number_id"]

    with pytest.raises(PermanentPlatformError) as raised:
        graph.send_message(other_id, token, payloads.text_message("5215551234567", "hi"))
    assert raised.value.code == 100
    assert graph.get_phone_number(phone_number_id, token)["id"] == phone_number_id


def test_a_signup_code_can_be_exchanged_once(sim, graph):
    code = sim.signup()["code"]
    graph.exchange_code(code)

    with pytest.raises(PermanentPlatformError) as raised:
        graph.exchange_code(code)
    assert raised.value.code == 100
    assert raised.value.details["error_subcode"] == 36009


def test_a_reconnected_number_gets_a_new_code_for_the_same_token(sim, graph, number):
    phone_number_id, token = number

    assert graph.exchange_code(sim.new_code(phone_number_id)) == token


def test_exchange_code_rejects_a_wrong_app_secret(sim):
    simulator = Simulator(app_secret=APP_SECRET)
    simulator.start()
    try:
        wrong = GraphClient(simulator.base_url, app_id="app", app_secret="not-it")
        with pytest.raises(PermanentPlatformError) as raised:
            wrong.exchange_code(simulator.signup()["code"])
        assert raised.value.code == 1
    finally:
        simulator.stop()


def test_exchange_code_needs_the_app_credentials(sim):
    with pytest.raises(ValueError):
        GraphClient(sim.base_url).exchange_code("code")


def test_a_wrong_token_is_401_with_code_190(graph, number):
    phone_number_id, _ = number

    with pytest.raises(PermanentPlatformError) as raised:
        graph.send_message(phone_number_id, "EAAGwrong", payloads.text_message("5215551234567", "hi"))

    assert (raised.value.http_status, raised.value.code) == (401, 190)
    assert "fbtrace_id" in raised.value.details


def test_list_templates_follows_the_cursor_pages(graph, number):
    _, token = number

    items = list(graph.list_templates(DEFAULT_WABA_ID, token, limit=1))

    names = [item["name"] for item in items]
    assert names == ["hello_world", "payment_reminder", "order_update", "promo_pending"]
    assert {"id", "name", "language", "status", "category", "quality_score", "components"} <= set(items[0])


def test_list_templates_of_a_foreign_business_account_is_refused(graph, number):
    _, token = number

    with pytest.raises(PermanentPlatformError) as raised:
        list(graph.list_templates("999999", token))
    assert raised.value.code == 100


def test_template_from_graph_normalizes_the_platform_shape(graph, number):
    _, token = number
    templates = {t["name"]: template_from_graph(t) for t in graph.list_templates(DEFAULT_WABA_ID, token)}

    reminder = templates["payment_reminder"]
    assert reminder["status"] == "approved"
    assert reminder["language"] == "es"
    assert reminder["category"] == "UTILITY"
    assert reminder["body_text"] == "Hola {{1}}, tu saldo pendiente es {{2}}."
    assert reminder["variable_count"] == 2
    assert reminder["variables"] == [{"index": 1, "example": "Ana"}, {"index": 2, "example": "$150.00"}]
    assert reminder["header_type"] is None
    assert reminder["quality_score"] == "GREEN"
    assert templates["order_update"]["header_type"] == "image"
    assert templates["order_update"]["variable_count"] == 1
    assert templates["hello_world"]["variable_count"] == 0
    assert templates["promo_pending"]["status"] == "pending"


@pytest.mark.parametrize(
    ("body", "count"),
    [("Hello World", 0), ("Hi {{1}}", 1), ("{{1}} and {{ 2 }} and {{1}} again", 2), (None, 0), ("{{name}}", 0)],
)
def test_template_variable_count_counts_distinct_placeholders(body, count):
    assert template_variable_count(body) == count


def test_get_phone_number_reads_the_requested_fields(sim, graph, number):
    phone_number_id, token = number
    sim.set_number(phone_number_id, quality_rating="YELLOW", messaging_limit_tier="TIER_2K")

    info = graph.get_phone_number(phone_number_id, token)

    assert info["id"] == phone_number_id
    assert info["quality_rating"] == "YELLOW"
    assert info["messaging_limit_tier"] == "TIER_2K"
    assert info["verified_name"].startswith("Sim Business")
    assert info["display_phone_number"].startswith("+1 555")
    assert {"status", "platform_type", "code_verification_status"} <= set(info)


def test_subscribe_app(sim, graph, number):
    _, token = number

    graph.subscribe_app(DEFAULT_WABA_ID, token)


def test_contact_and_history_sync_each_run_once(graph, number):
    phone_number_id, token = number

    assert graph.sync_contacts(phone_number_id, token)
    assert graph.sync_history(phone_number_id, token)
    with pytest.raises(PermanentPlatformError):
        graph.sync_contacts(phone_number_id, token)
    with pytest.raises(PermanentPlatformError):
        graph.sync_history(phone_number_id, token)


@pytest.mark.parametrize(
    ("payload", "code"),
    [
        (payloads.template_message("5215551234567", "no_such_template", "es"), 132001),
        (payloads.template_message("5215551234567", "payment_reminder", "en_US", ["a", "b"]), 132001),
        (payloads.template_message("5215551234567", "promo_pending", "en_US", ["x"]), 132001),
        (payloads.template_message("5215551234567", "payment_reminder", "es", ["only one"]), 132000),
        (payloads.template_message("5215551234567", "order_update", "en_US", ["#1"]), 132012),
        ({"messaging_product": "whatsapp", "to": "5215551234567", "type": "text"}, 100),
        ({"to": "5215551234567", "type": "text", "text": {"body": "hi"}}, 100),
    ],
    ids=["unknown", "wrong-language", "pending", "param-count", "missing-header", "no-text", "no-product"],
)
def test_invalid_sends_are_permanent_errors(sim, graph, number, payload, code):
    phone_number_id, token = number
    sent_before = len(sim.sent())

    with pytest.raises(PermanentPlatformError) as raised:
        graph.send_message(phone_number_id, token, payload)

    assert raised.value.code == code
    assert len(sim.sent()) == sent_before


def test_a_template_with_its_media_header_is_accepted(graph, number):
    phone_number_id, token = number
    header = {"type": "image", "link": "https://example.com/box.jpg"}
    payload = payloads.template_message("5215551234567", "order_update", "en_US", ["#1"], header=header)

    assert graph.send_message(phone_number_id, token, payload).startswith("wamid.")


def test_platform_500s_are_retryable(sim, graph, number):
    phone_number_id, token = number
    sim.fail("500", seconds=30)
    try:
        with pytest.raises(RetryablePlatformError) as raised:
            graph.send_message(phone_number_id, token, payloads.text_message("5215551234567", "hi"))
    finally:
        sim.fail("off")

    assert (raised.value.http_status, raised.value.code) == (500, 131000)
    assert graph.send_message(phone_number_id, token, payloads.text_message("5215551234567", "hi"))


def test_a_timeout_is_retryable_and_ambiguous_and_the_send_may_still_be_accepted(sim, number):
    phone_number_id, token = number
    impatient = GraphClient(sim.base_url, timeout=(1, 0.3))
    sim.fail("timeout", seconds=30, hang=0.6)
    try:
        with pytest.raises(PlatformUnavailableError) as raised:
            impatient.send_message(phone_number_id, token, payloads.text_message("5215557654321", "hi",
                                                                                   callback_data="late"))
    finally:
        sim.fail("off")

    assert raised.value.retryable and raised.value.ambiguous
    deadline = time.monotonic() + 3
    while not any(item["biz_opaque_callback_data"] == "late" for item in sim.sent()):
        assert time.monotonic() < deadline, "the hung send was never accepted"
        time.sleep(0.05)


def test_a_timeout_on_a_kept_alive_connection_is_ambiguous_and_the_next_call_opens_another(sim, number):
    phone_number_id, token = number
    impatient = GraphClient(sim.base_url, timeout=(1, 0.3))
    assert impatient.send_message(phone_number_id, token, payloads.text_message("5215557654321", "first"))
    sim.fail("timeout", seconds=30, hang=0.6)
    try:
        with pytest.raises(PlatformUnavailableError) as raised:
            impatient.send_message(phone_number_id, token, payloads.text_message("5215557654321", "hung"))
    finally:
        sim.fail("off")

    assert raised.value.retryable and raised.value.ambiguous
    assert "timeout" in str(raised.value)
    # The late answer to the hung call is never taken for the next call's.
    wamid = impatient.send_message(phone_number_id, token, payloads.text_message("5215557654321", "next",
                                                                                 callback_data="next"))
    deadline = time.monotonic() + 3
    while True:
        accepted = {item["biz_opaque_callback_data"]: item for item in sim.sent()}
        if "next" in accepted:
            break
        assert time.monotonic() < deadline, "the next send was never accepted"
        time.sleep(0.05)
    assert accepted["next"]["wamid"] == wamid


class ScriptedPlatform:
    """A plain TCP server that answers the requests on each connection with the next of `answers`
    (raw bytes, written as given), and counts the connections it accepted."""

    def __init__(self, answers: list[bytes]):
        self.answers = list(answers)
        self.connections = 0
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self):
        while self.answers:
            try:
                conn, _ = self.server.accept()
            except OSError:
                return
            self.connections += 1
            with conn:
                data = b""
                while self.answers:
                    while b"\r\n\r\n" not in data:
                        chunk = conn.recv(65536)
                        if not chunk:
                            break
                        data += chunk
                    if b"\r\n\r\n" not in data:
                        break
                    head, _, data = data.partition(b"\r\n\r\n")
                    length = int(dict(line.split(b": ", 1) for line in head.split(b"\r\n")[1:]).get(
                        b"Content-Length", b"0"))
                    while len(data) < length:
                        data += conn.recv(65536)
                    data = data[length:]
                    answer = self.answers.pop(0)
                    conn.sendall(answer)
                    if b"Connection: close" in answer:
                        break

    def close(self):
        self.server.close()


def _answer(body: bytes, *headers: str, framing: str = "length") -> bytes:
    head = ["HTTP/1.1 200 OK", "Content-Type: application/json", *headers]
    if framing == "chunked":
        head.append("Transfer-Encoding: chunked")
        middle = len(body) // 2
        payload = (f"{middle:x};ext=1\r\n".encode() + body[:middle] + b"\r\n"
                   + f"{len(body) - middle:X}\r\n".encode() + body[middle:] + b"\r\n0\r\nX-Trailer: 1\r\n\r\n")
    else:
        head.append(f"Content-Length: {len(body)}")
        payload = body
    return ("\r\n".join(head) + "\r\n\r\n").encode() + payload


def test_answers_on_a_kept_alive_connection_are_framed_by_length_chunks_or_its_close():
    sent = [json.dumps({"messages": [{"id": f"wamid.{n}"}]}).encode() for n in range(5)]
    platform = ScriptedPlatform([
        _answer(sent[0]),
        b"HTTP/1.1 100 Continue\r\n\r\n" + _answer(sent[1], framing="chunked"),
        _answer(gzip.compress(sent[2]), "Content-Encoding: gzip"),
        _answer(sent[3], "Connection: close"),
        _answer(sent[4]),
    ])
    try:
        client = GraphClient(f"http://127.0.0.1:{platform.port}", timeout=(2, 2))
        wamids = [client.send_message("1", "token", payloads.text_message("5215551234567", "hi")) for _ in range(5)]
    finally:
        platform.close()

    assert wamids == [f"wamid.{n}" for n in range(5)]
    assert platform.connections == 2  # a new one only after the platform said it closes the first


def test_a_connection_closed_mid_answer_is_an_ambiguous_failure_and_not_reused():
    body = json.dumps({"messages": [{"id": "wamid.whole"}]}).encode()
    # The second answer ends five bytes short of its Content-Length, and the connection with it.
    platform = ScriptedPlatform([_answer(body), _answer(body, "Connection: close")[:-5], _answer(body)])
    try:
        client = GraphClient(f"http://127.0.0.1:{platform.port}", timeout=(2, 2))
        assert client.send_message("1", "token", payloads.text_message("5215551234567", "hi")) == "wamid.whole"
        with pytest.raises(PlatformUnavailableError) as raised:
            client.send_message("1", "token", payloads.text_message("5215551234567", "hi"))
        assert raised.value.retryable and raised.value.ambiguous
        assert client.send_message("1", "token", payloads.text_message("5215551234567", "hi")) == "wamid.whole"
    finally:
        platform.close()

    assert platform.connections == 2


def test_a_refused_connection_is_retryable_and_never_reached_the_platform():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    client = GraphClient(f"http://127.0.0.1:{port}", timeout=(0.5, 0.5))

    with pytest.raises(PlatformUnavailableError) as raised:
        client.send_message("1", "token", payloads.text_message("5215551234567", "hi"))

    assert raised.value.retryable
    assert not raised.value.ambiguous


def test_a_stopped_simulator_stops_answering_on_open_connections():
    simulator = Simulator()
    simulator.start()
    signup = simulator.signup()
    client = GraphClient(simulator.base_url, app_id="app", app_secret="s", timeout=(0.5, 0.5))
    token = client.exchange_code(signup["code"])
    simulator.stop()

    with pytest.raises(PlatformUnavailableError):
        client.get_phone_number(signup["phone_number_id"], token)


def test_the_platform_certificate_is_verified_against_the_configured_ca(tmp_path, monkeypatch):
    """HTTPS to the platform: a certificate no trusted CA signed is refused before anything is
    sent; the same server is reached once the environment's CA bundle names its CA."""
    ca = trustme.CA()
    bundle = tmp_path / "ca.pem"
    ca.cert_pem.write_to_path(str(bundle))
    accepted = json.dumps({"messages": [{"id": "wamid.tls"}]}).encode()
    platform = Receiver(ca, names=("localhost",), respond=lambda request: Reply(body=accepted))
    try:
        monkeypatch.delenv("REQUESTS_CA_BUNDLE", raising=False)
        monkeypatch.delenv("CURL_CA_BUNDLE", raising=False)
        untrusting = GraphClient(f"https://localhost:{platform.port}", timeout=(2, 2))
        with pytest.raises(PlatformUnavailableError) as refused:
            untrusting.send_message("1", "token", payloads.text_message("5215551234567", "hi"))
        assert "CERTIFICATE_VERIFY_FAILED" in str(refused.value)
        assert platform.requests == []

        monkeypatch.setenv("REQUESTS_CA_BUNDLE", str(bundle))
        trusting = GraphClient(f"https://localhost:{platform.port}", timeout=(2, 2))
        assert trusting.send_message("1", "token", payloads.text_message("5215551234567", "hi")) == "wamid.tls"
        # The second call goes over the connection the first one opened, through TLS as well.
        assert trusting.send_message("1", "token", payloads.text_message("5215551234567", "again")) == "wamid.tls"
        request, again = platform.requests
        assert json.loads(again.body)["text"]["body"] == "again"
        assert request.path == "/v26.0/1/messages"
        assert request.headers["Authorization"] == "Bearer token"
        assert json.loads(request.body)["text"]["body"] == "hi"

        # A certificate for another name is refused even from the trusted CA.
        wrong_name = Receiver(ca, names=("elsewhere.example",), respond=lambda request: Reply(body=accepted))
        try:
            with pytest.raises(PlatformUnavailableError):
                GraphClient(f"https://localhost:{wrong_name.port}", timeout=(2, 2)).send_message(
                    "1", "token", payloads.text_message("5215551234567", "hi"))
            assert wrong_name.requests == []
        finally:
            wrong_name.close()
    finally:
        platform.close()


# The error envelope and the retryable / permanent split


def envelope(code, subcode=None, details="details"):
    error = {"message": f"(#{code}) message", "type": "OAuthException", "code": code,
             "error_data": {"messaging_product": "whatsapp", "details": details}, "fbtrace_id": "Abc"}
    if subcode is not None:
        error["error_subcode"] = subcode
    return {"error": error}


@pytest.mark.parametrize(
    ("http_status", "code", "kind"),
    [
        (400, 130429, ThrottledError),
        (400, 131056, ThrottledError),
        (400, 131057, ThrottledError),
        (400, 80007, ThrottledError),
        (500, 131000, RetryablePlatformError),
        (503, 131016, RetryablePlatformError),
        (502, 999999, RetryablePlatformError),
        (400, 131026, PermanentPlatformError),
        (400, 100, PermanentPlatformError),
        (401, 190, PermanentPlatformError),
        (400, 131047, PermanentPlatformError),
        (404, 132001, PermanentPlatformError),
    ],
)
def test_error_codes_split_into_retryable_and_permanent(http_status, code, kind):
    error = error_from_response(http_status, envelope(code))

    assert type(error) is kind
    assert error.code == code
    assert error.http_status == http_status
    assert error.retryable is issubclass(kind, RetryablePlatformError)


def test_the_envelope_fields_are_kept():
    error = error_from_response(400, envelope(131056, subcode=2494065, details="pair limit"))

    assert isinstance(error, ThrottledError) and error.pair_rate_limited
    assert error.message == "(#131056) message"
    assert error.details["details"] == "pair limit"
    assert error.details["error_subcode"] == 2494065
    assert error.details["fbtrace_id"] == "Abc"
    assert error.details["type"] == "OAuthException"


def test_throughput_throttling_is_not_a_pair_limit():
    assert not error_from_response(400, envelope(130429)).pair_rate_limited


@pytest.mark.parametrize(
    ("http_status", "body", "kind"),
    [
        (502, b"<html>Bad gateway</html>", RetryablePlatformError),
        (503, None, RetryablePlatformError),
        (429, b"", ThrottledError),
        (400, b"not json", PermanentPlatformError),
        (400, '{"error": {"code": "131056", "message": "as text"}}', ThrottledError),
    ],
)
def test_bodies_without_a_usable_envelope_fall_back_on_the_http_status(http_status, body, kind):
    assert type(error_from_response(http_status, body)) is kind


# Payload builders


def test_template_message_shape():
    header = {"type": "document", "link": "https://example.com/a.pdf", "filename": "a.pdf"}

    payload = payloads.template_message("521555", "order_update", "en_US", ["#1", 2], header=header,
                                        callback_data="cb")

    assert payload == {
        "messaging_product": "whatsapp",
        "recipient_type": "individual",
        "to": "521555",
        "type": "template",
        "template": {
            "name": "order_update",
            "language": {"code": "en_US"},
            "components": [
                {"type": "header", "parameters": [
                    {"type": "document", "document": {"link": "https://example.com/a.pdf", "filename": "a.pdf"}}]},
                {"type": "body", "parameters": [{"type": "text", "text": "#1"}, {"type": "text", "text": "2"}]},
            ],
        },
        "biz_opaque_callback_data": "cb",
    }


def test_template_message_without_parameters_has_no_components():
    payload = payloads.template_message("521555", "hello_world", "en_US")

    assert payload["template"] == {"name": "hello_world", "language": {"code": "en_US"}}
    assert "biz_opaque_callback_data" not in payload


def test_text_message_shape():
    assert payloads.text_message("521555", "hola", preview_url=True, callback_data="m1") == {
        "messaging_product": "whatsapp",
        "recipient_type": "individual",
        "to": "521555",
        "type": "text",
        "text": {"preview_url": True, "body": "hola"},
        "biz_opaque_callback_data": "m1",
    }


def test_media_message_shapes():
    image = payloads.media_message("521555", "image", link="https://example.com/a.jpg", caption="look")
    document = payloads.media_message("521555", "document", media_id="123", filename="bill.pdf")
    audio = payloads.media_message("521555", "audio", media_id="456")

    assert image["type"] == "image"
    assert image["image"] == {"link": "https://example.com/a.jpg", "caption": "look"}
    assert document["document"] == {"id": "123", "filename": "bill.pdf"}
    assert audio["audio"] == {"id": "456"}


@pytest.mark.parametrize(
    "kwargs",
    [
        {"kind": "audio", "media_id": "1", "caption": "no captions on audio"},
        {"kind": "image"},
        {"kind": "image", "link": "https://example.com/a.jpg", "media_id": "1"},
        {"kind": "image", "link": "https://example.com/a.jpg", "filename": "only documents"},
        {"kind": "hologram", "media_id": "1"},
    ],
)
def test_media_message_refuses_what_the_platform_would(kwargs):
    with pytest.raises(ValueError):
        payloads.media_message("521555", **kwargs)


def test_interactive_buttons_shape():
    payload = payloads.interactive_buttons(
        "521555", "Pay now?", [{"id": "yes", "title": "Yes"}, {"id": "no", "title": "No"}],
        header="Your bill", footer="Thanks", callback_data="cb",
    )

    assert payload["type"] == "interactive"
    assert payload["interactive"] == {
        "type": "button",
        "header": {"type": "text", "text": "Your bill"},
        "body": {"text": "Pay now?"},
        "footer": {"text": "Thanks"},
        "action": {"buttons": [
            {"type": "reply", "reply": {"id": "yes", "title": "Yes"}},
            {"type": "reply", "reply": {"id": "no", "title": "No"}},
        ]},
    }
    assert payload["biz_opaque_callback_data"] == "cb"


def test_interactive_buttons_take_one_to_three_buttons():
    with pytest.raises(ValueError):
        payloads.interactive_buttons("521555", "?", [{"id": str(n), "title": str(n)} for n in range(4)])


def test_interactive_list_shape():
    sections = [{"title": "Plans", "rows": [{"id": "p1", "title": "Monthly", "description": "12 payments"},
                                            {"id": "p2", "title": "Weekly"}]}]

    payload = payloads.interactive_list("521555", "Choose a plan", "Plans", sections)

    assert payload["interactive"] == {
        "type": "list",
        "body": {"text": "Choose a plan"},
        "action": {"button": "Plans", "sections": [{"title": "Plans", "rows": [
            {"id": "p1", "title": "Monthly", "description": "12 payments"},
            {"id": "p2", "title": "Weekly"},
        ]}]},
    }


def test_every_builder_is_accepted_by_the_simulator(graph, number):
    phone_number_id, token = number
    to = "5215551230001"
    built = [
        payloads.text_message(to, "hi"),
        payloads.media_message(to, "image", link="https://example.com/a.jpg", caption="c"),
        payloads.media_message(to, "audio", media_id="1"),
        payloads.interactive_buttons(to, "?", [{"id": "a", "title": "A"}]),
        payloads.interactive_list(to, "?", "Open", [{"rows": [{"id": "r", "title": "R"}]}]),
        payloads.template_message(to, "hello_world", "en_US"),
    ]

    assert all(graph.send_message(phone_number_id, token, payload).startswith("wamid.") for payload in built)
