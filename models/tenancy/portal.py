"""The company portal's people: users, invitations, sign-in sessions, two-factor and the audit log.

- A user belongs to one tenant with a role: `owner` (everything, users included), `developer`
  (keys, webhooks, numbers, campaigns) or `viewer` (reads only). An email signs in to one company.
- A user joins through an invitation: a one-time token (only its SHA-256 is stored) that expires.
- Passwords are hashed with argon2id. A session is a row keyed by the SHA-256 of the cookie's
  random token; the row carries the CSRF token of its forms. A session opened by a password
  while the user has two-factor on stays `pending` until a TOTP code is given.
- Every action taken in the portal is written to the audit log, in the transaction of the change
  where there is one.
- A user may choose the language of their pages; without one, the browser's decides.
"""

from __future__ import annotations

import datetime as dt
import functools
import hashlib
import hmac
import secrets as random_secrets

import argon2
import pyotp

from config import get_settings
from config.i18n import LANGUAGES
from models.clock import utcnow
from models.errors import Conflict, Invalid, NotFound
from models.ids import new_id
from models.store import secrets
from models.store.db import atomic
from models.tenancy.tables import (
    MAX_EMAIL,
    ROLES,
    AuditEntry,
    PortalInvitation,
    PortalPolicy,
    PortalSession,
    PortalUser,
)

INVITATION_TTL = dt.timedelta(hours=72)
SESSION_TTL = dt.timedelta(hours=12)
SESSION_IDLE = dt.timedelta(hours=2)
# A session's last_seen_at is written at most this often, not on every page.
SEEN_EVERY = dt.timedelta(minutes=1)
PENDING_TTL = dt.timedelta(minutes=5)
MIN_PASSWORD = 12
MAX_PASSWORD = 256
TOTP_ISSUER = "Messaging service"

_hasher = argon2.PasswordHasher()  # argon2id with the library's current recommended parameters


@functools.cache
def _dummy_hash() -> str:
    """Verified against when the email is unknown, so a miss costs what a wrong password costs.
    Made on first use, not at import: every process that imports this module would pay for it."""
    return _hasher.hash(random_secrets.token_urlsafe(16))


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def normalize_email(email: str) -> str:
    email = email.strip().lower()
    local, _, domain = email.partition("@")
    if not local or "." not in domain or len(email) > MAX_EMAIL or any(c.isspace() for c in email):
        raise Invalid("enter a valid email address", details={"errors": {"email": ["not a valid email address"]}})
    return email


def check_role(role: str) -> str:
    if role not in ROLES:
        raise Invalid(f"the role is one of {', '.join(ROLES)}", details={"errors": {"role": ["unknown role"]}})
    return role


# --- audit ---------------------------------------------------------------------------------


def audit(tenant_id: int, user: PortalUser | None, action: str, target: str | None = None,
          details: dict | None = None, ip: str | None = None, actor: str | None = None) -> None:
    """Written as `actor` when given, else as the user, else as `svcctl` (an administrator's command)."""
    AuditEntry.create(tenant=tenant_id, user=user.id if user else None,
                      actor=actor or (user.email if user else "svcctl"),
                      action=action, target=target, details=details or None, ip=ip)


def audit_log(tenant_id: int):
    return AuditEntry.select().where(AuditEntry.tenant == tenant_id).order_by(AuditEntry.id.desc())


# --- invitations ---------------------------------------------------------------------------


def invitation_url(token: str) -> str:
    return f"{get_settings().public_url}/portal/invitations/{token}"


def invite(tenant_id: int, email: str, role: str, invited_by: PortalUser | None = None,
           ip: str | None = None) -> tuple[PortalInvitation, str]:
    """An invitation to join the company; returns it with its token, shown only now."""
    email = normalize_email(email)
    check_role(role)
    if PortalUser.get_or_none(PortalUser.email == email) is not None:
        raise Conflict(f"{email} already has a portal user", code="user_exists")
    token = "pinv_" + random_secrets.token_urlsafe(32)
    now = utcnow()
    with atomic():
        invitation = PortalInvitation.create(public_id=new_id("inv_"), tenant=tenant_id, email=email, role=role,
                                             token_hash=_digest(token), invited_by=invited_by, created_at=now,
                                             expires_at=now + INVITATION_TTL)
        audit(tenant_id, invited_by, "user.invited", email, {"role": role}, ip)
    return invitation, token


def open_invitation(token: str) -> PortalInvitation:
    invitation = PortalInvitation.get_or_none(PortalInvitation.token_hash == _digest(token))
    if invitation is None or invitation.accepted_at is not None or invitation.expires_at <= utcnow():
        raise NotFound("this invitation does not exist, was used already or has expired", code="invitation_not_found")
    return invitation


def check_password(password: str) -> str:
    if not MIN_PASSWORD <= len(password) <= MAX_PASSWORD:
        raise Invalid(f"a password is {MIN_PASSWORD} to {MAX_PASSWORD} characters",
                      details={"errors": {"password": ["too short" if len(password) < MIN_PASSWORD else "too long"]}})
    return password


def accept_invitation(token: str, password: str, ip: str | None = None) -> PortalUser:
    """Create the invited user with this password; the invitation cannot be used again."""
    check_password(password)
    password_hash = _hasher.hash(password)
    with atomic():
        invitation = open_invitation(token)
        # Conditional on still being open: two tabs submitting the same link create one user.
        taken = PortalInvitation.update(accepted_at=utcnow()).where(
            (PortalInvitation.id == invitation.id) & PortalInvitation.accepted_at.is_null()).execute()
        if taken != 1 or PortalUser.get_or_none(PortalUser.email == invitation.email) is not None:
            raise Conflict("this invitation was used already", code="invitation_used")
        user = PortalUser.create(public_id=new_id("usr_"), tenant=invitation.tenant_id, email=invitation.email,
                                 role=invitation.role, password_hash=password_hash)
        audit(invitation.tenant_id, user, "user.joined", user.email, {"role": user.role}, ip)
    return user


def create_user(tenant_id: int, email: str, role: str, password: str) -> PortalUser:
    """A user made by an administrator (the demo company's owner), without an invitation."""
    email = normalize_email(email)
    check_role(role)
    password_hash = _hasher.hash(check_password(password))
    with atomic():
        if PortalUser.get_or_none(PortalUser.email == email) is not None:
            raise Conflict(f"{email} already has a portal user", code="user_exists")
        user = PortalUser.create(public_id=new_id("usr_"), tenant=tenant_id, email=email, role=role,
                                 password_hash=password_hash)
        audit(tenant_id, None, "user.created", email, {"role": role})
    return user


def reset_password(email: str, password: str) -> PortalUser:
    """An administrator's reset: a new password, and every session of the user ended."""
    user = PortalUser.get_or_none(PortalUser.email == normalize_email(email))
    if user is None:
        raise NotFound(f"no portal user {email}", code="user_not_found")
    password_hash = _hasher.hash(check_password(password))
    with atomic():
        PortalUser.update(password_hash=password_hash).where(PortalUser.id == user.id).execute()
        PortalSession.delete().where(PortalSession.user == user.id).execute()
        audit(user.tenant_id, None, "user.password_reset", user.email)
    return user


def change_password(user: PortalUser, current: str, new: str, keep_session: PortalSession,
                    ip: str | None = None) -> bool:
    """The user's own change: False when `current` is wrong. Every other session of the user ends."""
    if authenticate(user.email, current) is None:
        return False
    password_hash = _hasher.hash(check_password(new))
    with atomic():
        PortalUser.update(password_hash=password_hash).where(PortalUser.id == user.id).execute()
        PortalSession.delete().where((PortalSession.user == user.id) & (PortalSession.id != keep_session.id)).execute()
        audit(user.tenant_id, user, "user.password_changed", user.email, None, ip)
    return True


def generated_password() -> str:
    return random_secrets.token_urlsafe(15)


# --- sign-in -------------------------------------------------------------------------------


def authenticate(email: str, password: str) -> PortalUser | None:
    """The user these credentials name, or None; the same work whether or not the email exists."""
    try:
        email = normalize_email(email)
    except Invalid:
        email = ""
    user = PortalUser.get_or_none(PortalUser.email == email) if email else None
    # No password is longer than MAX_PASSWORD: a longer one is wrong, checked for the same cost.
    fits = len(password) <= MAX_PASSWORD
    try:
        _hasher.verify(user.password_hash if user and fits else _dummy_hash(), password[:MAX_PASSWORD])
    except (argon2.exceptions.VerificationError, argon2.exceptions.InvalidHashError):
        return None
    if user is None or not fits:
        return None
    if _hasher.check_needs_rehash(user.password_hash):
        PortalUser.update(password_hash=_hasher.hash(password)).where(PortalUser.id == user.id).execute()
    return user


def totp_required(user: PortalUser) -> bool:
    return user.has_totp or policy_of(user.tenant_id).require_totp


def start_session(user: PortalUser, ip: str | None, user_agent: str | None) -> tuple[PortalSession, str]:
    """A new session (always a new token: sign-in never keeps a cookie set before it)."""
    token = random_secrets.token_urlsafe(32)
    now = utcnow()
    pending = user.has_totp
    with atomic():
        session = PortalSession.create(
            token_hash=_digest(token), user=user, csrf_token=random_secrets.token_urlsafe(32), pending_totp=pending,
            ip=ip, user_agent=(user_agent or "")[:255] or None, created_at=now, last_seen_at=now,
            expires_at=now + (PENDING_TTL if pending else SESSION_TTL))
        if not pending:
            PortalUser.update(last_sign_in_at=now).where(PortalUser.id == user.id).execute()
            audit(user.tenant_id, user, "session.signed_in", None, None, ip)
    return session, token


def session_for(token: str | None) -> PortalSession | None:
    """The live session this cookie token names (its user joined), or None."""
    if not token or len(token) > 100:
        return None
    found = (PortalSession.select(PortalSession, PortalUser).join(PortalUser)
             .where(PortalSession.token_hash == _digest(token)).first())
    if found is None:
        return None
    now = utcnow()
    if found.expires_at <= now or found.last_seen_at + SESSION_IDLE <= now:
        PortalSession.delete().where(PortalSession.id == found.id).execute()
        return None
    if found.last_seen_at + SEEN_EVERY <= now:
        PortalSession.update(last_seen_at=now).where(PortalSession.id == found.id).execute()
    return found


def prune(now: dt.datetime | None = None) -> tuple[int, int]:
    """Delete sessions past their expiry or idle limit, and invitations expired a week ago."""
    now = now or utcnow()
    with atomic():
        sessions = PortalSession.delete().where((PortalSession.expires_at <= now)
                                                | (PortalSession.last_seen_at <= now - SESSION_IDLE)).execute()
        invitations = PortalInvitation.delete().where(PortalInvitation.accepted_at.is_null()
                                                      & (PortalInvitation.expires_at <= now - dt.timedelta(days=7))
                                                      ).execute()
    return sessions, invitations


def end_session(session: PortalSession, ip: str | None = None) -> None:
    with atomic():
        PortalSession.delete().where(PortalSession.id == session.id).execute()
        audit(session.user.tenant_id, session.user, "session.signed_out", None, None, ip)


def end_all_sessions(user: PortalUser, ip: str | None = None) -> int:
    with atomic():
        ended = PortalSession.delete().where(PortalSession.user == user.id).execute()
        audit(user.tenant_id, user, "session.signed_out_everywhere", None, {"sessions": ended}, ip)
    return ended


# --- two-factor ----------------------------------------------------------------------------


def _accept_code(secret: str, code: str, last_step: int | None, now: dt.datetime | None = None) -> int | None:
    """The time step `code` matches (this one or the one either side), or None. A step at or
    before `last_step` is refused, so a code seen once cannot be used again."""
    code = "".join(code.split())
    if not code.isdigit() or len(code) != 6:
        return None
    totp = pyotp.TOTP(secret)
    moment = (now or dt.datetime.now(dt.UTC)).timestamp()
    current = totp.timecode(dt.datetime.fromtimestamp(moment, dt.UTC))
    for step in (current - 1, current, current + 1):
        if last_step is not None and step <= last_step:
            continue
        if hmac.compare_digest(totp.generate_otp(step), code):
            return step
    return None


def complete_totp(session: PortalSession, code: str, ip: str | None = None) -> tuple[PortalSession, str] | None:
    """Turn a pending session into a full one with a valid code, under a new token (returned,
    with the session); None for a wrong code."""
    user = PortalUser.get_by_id(session.user_id)
    if not session.pending_totp or not user.has_totp:
        return None
    step = _accept_code(secrets.decrypt(user.totp_ciphertext), code, user.totp_last_step)
    if step is None:
        return None
    now = utcnow()
    token = random_secrets.token_urlsafe(32)
    with atomic():
        # Conditional on the step: of two sign-ins racing with one code, one wins.
        used = PortalUser.update(totp_last_step=step, last_sign_in_at=now).where(
            (PortalUser.id == user.id) & (PortalUser.totp_last_step.is_null() | (PortalUser.totp_last_step < step))
        ).execute()
        if used != 1:
            return None
        PortalSession.update(token_hash=_digest(token), pending_totp=False, expires_at=now + SESSION_TTL,
                             last_seen_at=now).where(PortalSession.id == session.id).execute()
        audit(user.tenant_id, user, "session.signed_in", None, {"two_factor": True}, ip)
    return PortalSession.get_by_id(session.id), token


def begin_totp(user: PortalUser) -> str:
    """A new secret for the user to add to an authenticator app; it counts once confirmed."""
    secret = pyotp.random_base32()
    PortalUser.update(totp_pending_ciphertext=secrets.encrypt(secret)).where(PortalUser.id == user.id).execute()
    return secret


def pending_totp_secret(user: PortalUser) -> str | None:
    return secrets.decrypt(user.totp_pending_ciphertext) if user.totp_pending_ciphertext else None


def provisioning_uri(user: PortalUser, secret: str) -> str:
    return pyotp.TOTP(secret).provisioning_uri(name=user.email, issuer_name=TOTP_ISSUER)


def confirm_totp(user: PortalUser, code: str, ip: str | None = None) -> bool:
    secret = pending_totp_secret(user)
    step = _accept_code(secret, code, None) if secret else None
    if step is None:
        return False
    with atomic():
        PortalUser.update(totp_ciphertext=user.totp_pending_ciphertext, totp_pending_ciphertext=None,
                          totp_last_step=step).where(PortalUser.id == user.id).execute()
        audit(user.tenant_id, user, "user.two_factor_enabled", user.email, None, ip)
    return True


def disable_totp(user: PortalUser, ip: str | None = None) -> None:
    if policy_of(user.tenant_id).require_totp:
        raise Conflict("the company requires two-factor sign-in", code="two_factor_required")
    with atomic():
        PortalUser.update(totp_ciphertext=None, totp_pending_ciphertext=None, totp_last_step=None).where(
            PortalUser.id == user.id).execute()
        audit(user.tenant_id, user, "user.two_factor_disabled", user.email, None, ip)


def policy_of(tenant_id: int) -> PortalPolicy:
    return PortalPolicy.get_or_none(PortalPolicy.tenant == tenant_id) or PortalPolicy(tenant=tenant_id)


def set_require_totp(user: PortalUser, required: bool, ip: str | None = None) -> None:
    if required and not user.has_totp:
        raise Conflict("turn on two-factor for yourself first", code="two_factor_not_enabled")
    with atomic():
        if PortalPolicy.update(require_totp=required).where(PortalPolicy.tenant == user.tenant_id).execute() == 0:
            PortalPolicy.create(tenant=user.tenant_id, require_totp=required)
        audit(user.tenant_id, user, "company.two_factor_required" if required else "company.two_factor_optional",
              None, None, ip)


# --- users ---------------------------------------------------------------------------------


def users_of(tenant_id: int):
    return PortalUser.select().where(PortalUser.tenant == tenant_id).order_by(PortalUser.id)


def invitations_of(tenant_id: int):
    return (PortalInvitation.select()
            .where((PortalInvitation.tenant == tenant_id) & PortalInvitation.accepted_at.is_null()
                   & (PortalInvitation.expires_at > utcnow()))
            .order_by(PortalInvitation.id.desc()))


def get_user(tenant_id: int, public_id: str) -> PortalUser:
    user = PortalUser.get_or_none((PortalUser.tenant == tenant_id) & (PortalUser.public_id == public_id))
    if user is None:
        raise NotFound(f"no user {public_id}", code="user_not_found")
    return user


def _other_owners(user: PortalUser) -> int:
    return (PortalUser.select().where((PortalUser.tenant == user.tenant_id) & (PortalUser.role == "owner")
                                      & (PortalUser.id != user.id)).count())


def change_role(actor: PortalUser, public_id: str, role: str, ip: str | None = None) -> PortalUser:
    check_role(role)
    with atomic():
        user = get_user(actor.tenant_id, public_id)
        if user.role == "owner" and role != "owner" and _other_owners(user) == 0:
            raise Conflict("a company keeps at least one owner", code="last_owner")
        PortalUser.update(role=role).where(PortalUser.id == user.id).execute()
        audit(actor.tenant_id, actor, "user.role_changed", user.email, {"from": user.role, "to": role}, ip)
    return get_user(actor.tenant_id, public_id)


def remove_user(actor: PortalUser, public_id: str, ip: str | None = None) -> None:
    with atomic():
        user = get_user(actor.tenant_id, public_id)
        if user.role == "owner" and _other_owners(user) == 0:
            raise Conflict("a company keeps at least one owner", code="last_owner")
        PortalUser.delete().where(PortalUser.id == user.id).execute()
        audit(actor.tenant_id, actor, "user.removed", user.email, None, ip)


def set_language(user: PortalUser, language: str | None, ip: str | None = None) -> None:
    """The user's own language for the pages, or None to follow the browser's."""
    if language is not None and language not in LANGUAGES:
        raise Invalid(f"the language is one of {', '.join(LANGUAGES)}", details={"errors": {"language": [
            "unknown language"]}})
    with atomic():
        PortalUser.update(language=language).where(PortalUser.id == user.id).execute()
        audit(user.tenant_id, user, "user.language_changed", user.email, {"language": language}, ip)
