"""Adapter for the messaging platform (WhatsApp Cloud API over the Graph API).

- `messaging.client`: `GraphClient`, the pooled Graph API client, and template helpers.
- `messaging.payloads`: bodies for `POST /{phone_number_id}/messages`.
- `messaging.errors`: typed errors, retryable or permanent.
- `messaging.webhooks`: signature check and parser for the platform's webhooks.
- `messaging.simulator`: a local HTTP stand-in for the platform (`svcctl sim`).

This package takes its settings as arguments and imports nothing from the service.
"""

from messaging.client import GraphClient, template_from_graph, template_variable_count
from messaging.errors import (
    PermanentPlatformError,
    PlatformError,
    PlatformUnavailableError,
    RetryablePlatformError,
    ThrottledError,
    error_from_response,
)
from messaging.webhooks import (
    AccountUpdate,
    EchoMessage,
    InboundMessage,
    PhoneQualityUpdate,
    StatusUpdate,
    TemplateStatusUpdate,
    Update,
    parse_notification,
    sign,
    verify_signature,
)

__all__ = [
    "AccountUpdate",
    "EchoMessage",
    "GraphClient",
    "InboundMessage",
    "PermanentPlatformError",
    "PhoneQualityUpdate",
    "PlatformError",
    "PlatformUnavailableError",
    "RetryablePlatformError",
    "StatusUpdate",
    "TemplateStatusUpdate",
    "ThrottledError",
    "Update",
    "error_from_response",
    "parse_notification",
    "sign",
    "template_from_graph",
    "template_variable_count",
    "verify_signature",
]
