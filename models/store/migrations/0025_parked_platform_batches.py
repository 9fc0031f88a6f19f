"""Platform webhook batches that keep failing are parked, and every batch keeps the callback data
its statuses carry.

- `parked_at`: set when a batch has used its attempts (models/numbers/tables.py, `MAX_ATTEMPTS`);
  a parked batch is left alone until an operator retries it (`svcctl inbox retry`).
- `callbacks`: the `biz_opaque_callback_data` of the batch's statuses, one a line, written when the
  batch is stored. Recovery holds back only the sends an unprocessed batch names, without reading
  (or being killed by) its body. Batches not processed yet get theirs here."""

import orjson
from peewee import PostgresqlDatabase


def _callbacks(body):
    try:
        payload = orjson.loads(body)
    except orjson.JSONDecodeError:
        return ""
    found = {}
    entries = payload.get("entry") if isinstance(payload, dict) else None
    for entry in entries if isinstance(entries, list) else []:
        changes = entry.get("changes") if isinstance(entry, dict) else None
        for change in changes if isinstance(changes, list) else []:
            if not isinstance(change, dict) or change.get("field") != "messages":
                continue
            value = change.get("value")
            if not isinstance(value, dict):
                continue
            statuses = value.get("statuses")
            for item in statuses if isinstance(statuses, list) else []:
                callback = item.get("biz_opaque_callback_data") if isinstance(item, dict) else None
                if isinstance(callback, str) and callback:
                    found[callback] = None
    return "\n".join(found)


def up(migrator, db):
    timestamp = "TIMESTAMP" if isinstance(db, PostgresqlDatabase) else "DATETIME"
    db.execute_sql(f'ALTER TABLE "platform_webhook_batch" ADD COLUMN "parked_at" {timestamp}')
    db.execute_sql('ALTER TABLE "platform_webhook_batch" ADD COLUMN "callbacks" TEXT')
    unprocessed = db.execute_sql('SELECT "id", "body" FROM "platform_webhook_batch" WHERE "processed_at" IS NULL')
    for batch_id, body in list(unprocessed):
        db.execute_sql(f'UPDATE "platform_webhook_batch" SET "callbacks" = {db.param} WHERE "id" = {db.param}',
                       (_callbacks(body), batch_id))
