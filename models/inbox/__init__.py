"""The inbox: the messaging platform's webhooks, from our side.

- `batches.py`: a signed POST stored as one batch and acknowledged; the worker claims and
  applies it, statuses last; a sweep finds what a lost task left behind.
- `updates.py`: what each update does: inbound messages and echoes reported, users remembered,
  the numbers' history, contacts, preferences, templates, quality and account state.

Applying a batch reaches into numbers, sending (statuses, the campaign a reply answers) and
receivables (the debts of the sender's phone), so the inbox sits above them; its tables are in
models/numbers/tables.py, where sending's recovery reads them.

This module imports none of them, so importing one stays cheap.
"""
