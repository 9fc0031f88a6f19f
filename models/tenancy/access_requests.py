"""Access requests: a company asks for access; an administrator approves (tenant + key) or rejects."""

from __future__ import annotations

from models.clock import utcnow
from models.errors import Conflict, DomainError, NotFound
from models.ids import new_id
from models.store.db import atomic
from models.tenancy.keys import create_key
from models.tenancy.tables import AccessRequest, Tenant
from models.tenancy.tenants import create_tenant

# An administrator reviews every pending request by hand, so the queue is bounded: per address,
# so that one client cannot fill it, and overall, so that many addresses cannot bury the real
# requests either. Reviewing (approving or rejecting) frees the places.
MAX_PENDING = 200
MAX_PENDING_PER_IP = 10


class ReviewQueueFull(DomainError):
    status = 429
    code = "rate_limited"


def submit(fields: dict, source_ip: str | None) -> AccessRequest:
    with atomic():
        pending = AccessRequest.select().where(AccessRequest.status == "pending")
        if pending.where(AccessRequest.source_ip == source_ip).count() >= MAX_PENDING_PER_IP:
            raise ReviewQueueFull(
                f"this address already has {MAX_PENDING_PER_IP} access requests waiting for review; "
                "wait for an answer", details={"scope": "access_requests_pending_per_ip",
                                               "limit": MAX_PENDING_PER_IP})
        if pending.count() >= MAX_PENDING:
            raise ReviewQueueFull("too many access requests are waiting for review; try again later",
                                  details={"scope": "access_requests_pending", "limit": MAX_PENDING})
        return AccessRequest.create(public_id=new_id("bcar_"), source_ip=source_ip, **fields)


def get(public_id: str) -> AccessRequest:
    request = AccessRequest.get_or_none(AccessRequest.public_id == public_id)
    if request is None:
        raise NotFound(f"no access request {public_id}", code="access_request_not_found")
    return request


def _mark_reviewed(request: AccessRequest, status: str, **changes) -> None:
    # Conditional on still being pending: two administrators cannot both decide the same request.
    updated = AccessRequest.update(status=status, reviewed_at=utcnow(), **changes).where(
        (AccessRequest.id == request.id) & (AccessRequest.status == "pending")).execute()
    if updated != 1:
        raise Conflict(f"access request {request.public_id} was already reviewed",
                       code="access_request_reviewed")


def approve(public_id: str, scopes: list[str], with_key: bool = True) -> tuple[AccessRequest, Tenant, str | None]:
    """Create the tenant and (unless `with_key` is False: the company's first owner creates keys
    in the portal) its first key; returns the key string, shown only now."""
    with atomic():
        request = get(public_id)
        if request.status != "pending":
            raise Conflict(f"access request {public_id} is {request.status}", code="access_request_reviewed")
        tenant = create_tenant(request.company_name)
        key_string = create_key(tenant, scopes)[1] if with_key else None
        _mark_reviewed(request, "approved", tenant=tenant)
    return get(public_id), tenant, key_string


def reject(public_id: str, reason: str | None) -> AccessRequest:
    with atomic():
        request = get(public_id)
        if request.status != "pending":
            raise Conflict(f"access request {public_id} is {request.status}", code="access_request_reviewed")
        _mark_reviewed(request, "rejected", decision_reason=reason)
    return get(public_id)
