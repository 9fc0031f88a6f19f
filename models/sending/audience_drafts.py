"""An uploaded audience kept between the steps of the portal's campaign form: a JSON file under
the data directory, named by an unguessable id and readable only by the user who uploaded it.

Once its campaign is created the draft keeps only the campaign's id, so the same form sent again
(a double click, the back button) leads to that campaign instead of creating a second one.
Drafts older than DRAFT_TTL are removed whenever a new one is written.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import time
from dataclasses import dataclass
from pathlib import Path

import orjson

from config import get_settings
from models.errors import NotFound
from models.sending.audiences import Audience

DRAFT_TTL = 24 * 3600  # seconds
FOLDER = "audience_drafts"


@dataclass
class Draft:
    id: str
    tenant_id: int
    user_id: int
    template_id: int
    filename: str
    audience: Audience | None
    campaign_id: str | None = None


def _folder() -> Path:
    folder = get_settings().data_dir / FOLDER
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    return folder


def _path(draft_id: str) -> Path:
    if not draft_id or len(draft_id) > 64 or not all(c.isalnum() or c in "-_" for c in draft_id):
        raise NotFound("no such draft", code="draft_not_found")
    return _folder() / f"{draft_id}.json"


def save(tenant_id: int, user_id: int, template_id: int, filename: str, audience: Audience) -> Draft:
    _remove_stale()
    draft = Draft(secrets.token_urlsafe(24), tenant_id, user_id, template_id, filename[:200], audience)
    _write(draft)
    return draft


def _write(draft: Draft) -> None:
    body = {"tenant": draft.tenant_id, "user": draft.user_id, "template": draft.template_id,
            "filename": draft.filename, "campaign": draft.campaign_id,
            "columns": draft.audience.columns if draft.audience else None,
            "rows": draft.audience.rows if draft.audience else None}
    path = _path(draft.id)
    partial = path.with_suffix(".part")
    partial.write_bytes(orjson.dumps(body))
    os.replace(partial, path)  # a reader sees the old draft or the new one, never half of one


def load(tenant_id: int, user_id: int, draft_id: str) -> Draft:
    """The user's draft, or a 404 (another user's or company's draft is no different from none)."""
    try:
        body = orjson.loads(_path(draft_id).read_bytes())
    except (FileNotFoundError, orjson.JSONDecodeError):
        raise NotFound("no such draft", code="draft_not_found") from None
    if body["tenant"] != tenant_id or body["user"] != user_id:
        raise NotFound("no such draft", code="draft_not_found")
    audience = Audience(body["columns"], body["rows"]) if body.get("rows") is not None else None
    return Draft(draft_id, tenant_id, user_id, body["template"], body["filename"], audience, body.get("campaign"))


@contextlib.contextmanager
def claimed(draft: Draft):
    """Held while the draft's campaign is created: a second submission at the same time waits for
    nothing and sees NotFound-free `None`, the first one's campaign id being written when it ends."""
    lock = _path(draft.id).with_suffix(".lock")
    try:
        handle = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
    except FileExistsError:
        yield False
        return
    os.close(handle)
    try:
        yield True
    finally:
        lock.unlink(missing_ok=True)


def mark_sent(draft: Draft, campaign_id: str) -> None:
    """Keep only the campaign's id: the rows are in the campaign now."""
    draft.campaign_id, draft.audience = campaign_id, None
    _write(draft)


def _remove_stale() -> None:
    cutoff = time.time() - DRAFT_TTL
    for path in _folder().iterdir():
        with contextlib.suppress(FileNotFoundError):
            if path.stat().st_mtime < cutoff:
                path.unlink()
