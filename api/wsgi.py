"""The WSGI entry point for gunicorn: each worker builds the app (and its pool) after the fork."""

from api.app import create_app
from config import get_settings
from config.logs import configure_logging

configure_logging(get_settings().log_format)
app = create_app()
