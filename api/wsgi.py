"""The WSGI entry point for gunicorn: each worker builds the app (and its pool) after the fork."""

from api.app import create_app

app = create_app()
