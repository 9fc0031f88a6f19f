"""API routes of the accounts area."""

ROUTES: list = []
