"""Three of webhook_delivery's seven indexes go: the ones on event, endpoint and tenant alone.
Each is the first column of another index (event, endpoint, sequence), (endpoint, status,
next_attempt_at) and (tenant, id), which serves every query and cascade the single-column one
did, while the fan-out wrote all seven for every delivery it made."""


def up(migrator, db):
    for name in ("webhook_delivery_event_id", "webhook_delivery_endpoint_id", "webhook_delivery_tenant_id"):
        db.execute_sql(f'DROP INDEX IF EXISTS "{name}"')
