"""Onboarding attempts, the platform's stored webhook batches, and processed-wamid dedupe."""

from models.onboarding import OnboardingAttempt
from models.platform import PlatformWebhookBatch, ProcessedMessage


def up(migrator, db):
    db.create_tables([OnboardingAttempt, PlatformWebhookBatch, ProcessedMessage])
