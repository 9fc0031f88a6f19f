"""The WSGI entry point for gunicorn: each worker builds the app (and its pool) after the fork."""

import atexit

from api.app import create_app
from config import get_settings
from config.logs import configure_logging
from models.operations.heartbeats import Heartbeat
from models.operations.tables import API

configure_logging(get_settings().log_format)
app = create_app()
# After the fork (no preload), so each worker beats as itself.
atexit.register(Heartbeat(API, get_settings().web_threads).start().stop)
