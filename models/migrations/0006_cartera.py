"""Receivables: debtors, debts, installments, payments and their allocations, collection reminders."""

from models.cartera import TABLES


def up(migrator, db):
    db.create_tables(TABLES)
