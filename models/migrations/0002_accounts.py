"""Messaging accounts (numbers), templates and customer-service windows."""

from models.accounts import ContactWindow, MessagingAccount, Template


def up(migrator, db):
    db.create_tables([MessagingAccount, Template, ContactWindow])
