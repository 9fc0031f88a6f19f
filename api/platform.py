"""API routes of the platform area."""

ROUTES: list = []
