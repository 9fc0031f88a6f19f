"""The Falcon application: every area's routes under /api/v1, the few pages outside it, and the portal."""

from __future__ import annotations

import importlib

import falcon

import portal
from api.errors import handle_unexpected, serialize_falcon_error
from api.operations import NO_DATABASE_PATHS, RequestTelemetry
from config import Settings, get_settings, use_settings
from jobs.queue import load_tasks
from models.setup import init_db
from models.store.db import request_connections

BASE_PATH = "/api/v1"
# Each area module exposes ROUTES (under the base path) and may expose ROOT_ROUTES (pages the
# platform or a browser reaches, outside the versioned API and the OpenAPI document).
AREAS = ("operations", "access_requests", "credits", "accounts", "campaigns", "messages", "webhooks",
         "receivables", "payments", "dunning_plans", "inbox", "openapi")


class DatabaseConnection:
    """A pooled connection for every request, which the thread keeps for its next request when
    this one went cleanly (models/store/db.py, `RequestConnections`)."""

    def process_request(self, req, resp):
        if req.path in NO_DATABASE_PATHS:
            request_connections.set_aside()
            return
        req.context.opened_db = request_connections.take()

    def process_response(self, req, resp, resource, req_succeeded):
        if getattr(req.context, "opened_db", False):
            request_connections.give_back(req_succeeded)


def area_modules():
    return [importlib.import_module(f"api.{name}") for name in AREAS]


def load_modules() -> None:
    """Import every module `create_app` uses, building nothing (no app, no connection, no thread):
    gunicorn's master does it once before it forks its workers (api/gunicorn_settings.py)."""
    area_modules()
    portal.page_modules()
    load_tasks()


def create_app(settings: Settings | None = None) -> falcon.App:
    settings = use_settings(settings) if settings is not None else get_settings()
    init_db(settings)
    load_tasks()  # the queue's hooks: new events are fanned out, new work wakes the engine
    app = falcon.App(middleware=[RequestTelemetry(), DatabaseConnection()])
    app.req_options.strip_url_path_trailing_slash = True
    app.req_options.auto_parse_qs_csv = False
    app.set_error_serializer(serialize_falcon_error)
    app.add_error_handler(Exception, handle_unexpected)
    for module in area_modules():
        for path, resource in getattr(module, "ROUTES", []):
            app.add_route(BASE_PATH + path, resource)
        for path, resource in getattr(module, "ROOT_ROUTES", []):
            app.add_route(path, resource)
    portal.mount(app)
    return app
