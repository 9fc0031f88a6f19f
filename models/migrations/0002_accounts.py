"""Messaging accounts (numbers), templates and customer-service windows."""

from models.accounts import BusinessInitiated, ContactWindow, MessagingAccount, Template


def up(migrator, db):
    db.create_tables([MessagingAccount, Template, ContactWindow, BusinessInitiated])
