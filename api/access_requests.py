"""POST /access-requests: the public way in, reviewed by an administrator."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from api import ratelimit
from api.errors import ApiError
from api.operation import Reply, operation
from api.schemas import Email, HttpsUrl, Input, Output, text
from config.client_address import client_ip
from models.tenancy import access_requests

LIMIT_PER_IP_AND_EMAIL = 5  # the contract's
# A new email per request must not lift the limit: one address gets this many a minute in all.
LIMIT_PER_IP = 10
# A full review queue frees up only as an administrator works through it: ask back in an hour.
QUEUE_RETRY_AFTER = 3600


class AccessRequestInput(Input):
    company_name: text(255, 1)
    contact_name: text(255, 1)
    contact_email: Email
    tax_id: text(80) | None = None
    country: text(120) | None = None
    contact_phone: text(60) | None = None
    estimated_monthly_messages: Annotated[int, Field(ge=1, le=100_000_000)] | None = None
    estimated_numbers_count: Annotated[int, Field(ge=1, le=1000)] | None = None
    use_case: text(5000) | None = None
    webhook_url: HttpsUrl | None = None


class AccessRequestCreated(Output):
    request_id: str
    status: str


class AccessRequestReply(Output):
    success: bool
    message: str
    data: AccessRequestCreated


class AccessRequestsResource:
    @operation("Request access for a company", scope=None, body=AccessRequestInput,
               responses={201: AccessRequestReply}, errors=(422, 429), tags=("access",))
    def on_post(self, req, resp) -> Reply:
        body: AccessRequestInput = req.context.body
        ip = client_ip(req)
        ratelimit.check([ratelimit.Limit(f"ar:{ip}:{body.contact_email.lower()}", LIMIT_PER_IP_AND_EMAIL,
                                         "access_requests"),
                         ratelimit.Limit(f"ar-ip:{ip}", LIMIT_PER_IP, "access_requests_per_ip")])
        try:
            request = access_requests.submit(body.model_dump(), ip)
        except access_requests.ReviewQueueFull as error:
            raise ApiError(429, error.code, error.message, {**error.details, "retry_after": QUEUE_RETRY_AFTER},
                           headers={"Retry-After": str(QUEUE_RETRY_AFTER),
                                    "RateLimit-Limit": str(error.details["limit"]), "RateLimit-Remaining": "0",
                                    "RateLimit-Reset": str(QUEUE_RETRY_AFTER)}) from None
        return Reply(201, {
            "success": True,
            "message": "Access request received; an administrator will review it.",
            "data": {"request_id": request.public_id, "status": request.status},
        })


ROUTES = [("/access-requests", AccessRequestsResource())]
