"""API routes of the messages area."""

ROUTES: list = []
