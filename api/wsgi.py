"""The WSGI entry point for gunicorn: each worker builds the app (and its pool) after the fork."""

import atexit

from api.app import create_app
from config import get_settings
from config.logs import configure_logging
from models.operations.heartbeats import Heartbeat
from models.operations.tables import API

settings = get_settings()
configure_logging(settings.log_format, settings.log_level)
app = create_app()
# After the fork (no preload), so each worker beats as itself.
atexit.register(Heartbeat(API, settings.web_threads).start().stop)
