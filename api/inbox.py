"""The platform's webhook: verification (GET) and signed notifications (POST), outside /api/v1.

A POST is checked on its raw bytes, stored, and answered 200 at once; the worker processes it.
The platform retries anything but a quick 2xx for days, so nothing slow happens here.
"""

from __future__ import annotations

import hmac
import logging

import falcon
import orjson

from api.errors import ApiError, render_error
from api.operation import read_body
from config import get_settings
from messaging.webhooks import SIGNATURE_HEADER, verify_signature
from models.inbox import batches
from models.store.db import atomic

log = logging.getLogger(__name__)

PATH = "/platform/webhook"


class PlatformWebhookResource:
    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        """The platform's subscription check: echo `hub.challenge` for our verify token."""
        mode = req.get_param("hub.mode") or ""
        token = req.get_param("hub.verify_token") or ""
        challenge = req.get_param("hub.challenge")
        expected = get_settings().verify_token
        if mode != "subscribe" or challenge is None or not expected \
                or not hmac.compare_digest(token.encode(), expected.encode()):
            render_error(resp, ApiError(403, "verification_failed", "the verify token does not match"))
            return
        resp.status = falcon.HTTP_200
        resp.content_type = falcon.MEDIA_TEXT
        resp.text = challenge

    def on_post(self, req: falcon.Request, resp: falcon.Response) -> None:
        raw = read_body(req)
        # The signature covers the exact bytes sent: checked before anything parses them.
        signature = req.get_header(SIGNATURE_HEADER)
        if not verify_signature(signature, raw, get_settings().app_secret):
            code = "missing_signature" if not signature else "invalid_signature"
            raise ApiError(401, code, f"the {SIGNATURE_HEADER} header is missing or does not match the body")
        try:
            payload = orjson.loads(raw)
        except orjson.JSONDecodeError:
            raise ApiError(400, "bad_request", "the body is not valid JSON") from None
        if not isinstance(payload, dict):
            raise ApiError(400, "bad_request", "the body must be a JSON object")
        with atomic():
            batch = batches.store_batch(raw, payload)
        try:
            from jobs.inbox import process_platform_batch

            process_platform_batch(batch.id)
        except Exception:
            # Stored and committed: the sweep processes it. Answering an error would only make
            # the platform send it again.
            log.exception("could not queue platform webhook batch %s", batch.id)
        resp.status = falcon.HTTP_200
        resp.content_type = falcon.MEDIA_JSON
        resp.data = b'{"success":true}'


ROUTES: list = []
ROOT_ROUTES = [(PATH, PlatformWebhookResource())]
