"""API routes of the cartera area."""

ROUTES: list = []
