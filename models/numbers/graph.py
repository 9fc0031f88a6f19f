"""The Graph API from our side: the process's client for the configured platform, and a number's
token for it."""

from __future__ import annotations

import functools

from config import get_settings
from messaging.client import GraphClient
from models.numbers.tables import MessagingAccount
from models.store.secrets import decrypt


def graph_client() -> GraphClient:
    """The process's Graph API client for the configured platform (one pooled session)."""
    settings = get_settings()
    return _client_for(settings.graph_url, settings.graph_version, settings.app_id, settings.app_secret)


@functools.lru_cache(maxsize=4)
def _client_for(graph_url: str, version: str, app_id: str, app_secret: str) -> GraphClient:
    # Keyed by the settings it is built from: tests (and `svcctl`) switch platforms in one process.
    return GraphClient(graph_url, version, app_id=app_id, app_secret=app_secret)


def account_token(account: MessagingAccount) -> str:
    """The number's platform access token, decrypted; only ready accounts have one."""
    if not account.access_token:
        raise ValueError(f"account {account.public_id} has no access token (onboarding incomplete)")
    return decrypt(account.access_token)
