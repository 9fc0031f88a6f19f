"""Adapter for the messaging platform (WhatsApp Cloud API over the Graph API).

- `messaging.client`: `GraphClient`, the pooled Graph API client, and template helpers.
- `messaging.payloads`: bodies for `POST /{phone_number_id}/messages`.
- `messaging.errors`: typed errors, retryable or permanent.
- `messaging.webhooks`: signature check and parser for the platform's webhooks.
- `messaging.users`: `PlatformUser`, a WhatsApp user as the platform names them (in parsed webhooks).
- `messaging.simulator`: a local HTTP stand-in for the platform (`svcctl sim`).

This package takes its settings as arguments and imports nothing from the service. Its modules
are imported by name: a process that builds bodies or parses webhooks does not load the HTTP
client (`requests`) with them.
"""
