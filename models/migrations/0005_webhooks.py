"""Webhook endpoints, deliveries and the attempt log."""

from models.webhooks import WebhookAttempt, WebhookDelivery, WebhookEndpoint


def up(migrator, db):
    db.create_tables([WebhookEndpoint, WebhookDelivery, WebhookAttempt])
