"""No error text that is stored or logged carries a URL's secret parts.

The attack this answers: when the code exchange could not reach the platform, the transport's
error quoted the request URL, `client_secret` and signup code included, and the onboarding
attempt stored it in `error_detail`.
"""

from __future__ import annotations

import pytest
import requests

from messaging.errors import without_url_secrets
from models.numbers.tables import OnboardingAttempt
from tests.live_fixtures import *  # noqa: F403  (live_service)

SIGNUP_CODE = "signup-code-0123456789abcdef"


def test_a_failed_code_exchange_stores_and_logs_no_secret(live_service, alice, storage):
    live_service.kill("sim")  # the platform is down: the exchange fails in the transport
    link = requests.post(live_service.api_url + "/api/v1/accounts/coexistence-link", timeout=10,
                         json={"redirect_url": "https://example.test/done"}, headers=alice.headers)
    assert link.status_code == 201, link.text
    attempt_id = link.json()["data"]["attempt_id"]

    completed = requests.post(f"{live_service.api_url}/onboarding/{attempt_id}/complete", timeout=30,
                              data={"code": SIGNUP_CODE, "waba_id": "1234567", "phone_number_id": "7654321"},
                              allow_redirects=False)
    assert completed.status_code == 303
    assert "error=platform_unavailable" in completed.headers["Location"]

    stored = OnboardingAttempt.get(OnboardingAttempt.public_id == attempt_id)
    assert stored.status == "failed" and stored.error_detail
    assert "connection" in stored.error_detail  # what went wrong is still said
    logs = "".join(live_service.log(name) for name in ("api", "worker"))
    for text in (stored.error_detail, logs):
        assert storage.app_secret not in text
        assert SIGNUP_CODE not in text
        assert "client_secret" not in text


@pytest.mark.parametrize("text, kept, cut", [
    ("Max retries exceeded with url: /v21.0/oauth/access_token?client_id=a&client_secret=S3CR3T&code=C0DE "
     "(Caused by NewConnectionError('refused'))", ["/v21.0/oauth/access_token", "Caused by"], ["S3CR3T", "C0DE"]),
    ("GET https://alice:pa55@hooks.example/x?token=T0KEN#frag failed", ["https://", "hooks.example/x"],
     ["pa55", "T0KEN", "frag"]),
    ("is it there? no", ["is it there? no"], []),
])
def test_urls_lose_their_secret_parts(text, kept, cut):
    cleaned = without_url_secrets(text)
    for part in kept:
        assert part in cleaned
    for part in cut:
        assert part not in cleaned
