"""API routes of the webhooks area."""

ROUTES: list = []
