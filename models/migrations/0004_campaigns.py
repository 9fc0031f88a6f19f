"""Campaigns and their recipients, single messages, and the pacing buckets and engine heartbeats
of the database counter store."""

from models.campaigns import Campaign, CampaignRecipient
from models.counters import Heartbeat, PacingBucket
from models.messages import Message


def up(migrator, db):
    db.create_tables([Campaign, CampaignRecipient, Message, PacingBucket, Heartbeat])
