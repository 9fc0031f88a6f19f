"""API routes of the campaigns area."""

ROUTES: list = []
