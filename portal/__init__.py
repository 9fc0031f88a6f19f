"""The company portal: server-rendered pages under /portal over the same domain operations as the API."""

from __future__ import annotations

import importlib
from pathlib import Path

import falcon

from config.i18n import N_
from portal.web import BASE, HEADERS, error_page

PAGES = ("signin", "overview", "keys", "webhooks", "numbers", "campaigns", "audiences", "credits", "receivables",
         "dunning_plans", "team")
STATIC = Path(__file__).with_name("static")


def not_found(req: falcon.Request, resp: falcon.Response, **_params) -> None:
    resp.set_headers(HEADERS)
    error_page(req, resp, 404, N_("Not found"), N_("There is no such page in the portal."))


def page_modules() -> list:
    """The pages' modules, and last the debtor's page's."""
    return [importlib.import_module(f"portal.{name}") for name in (*PAGES, "debtor_links")]


def mount(app: falcon.App) -> None:
    *pages, debtor_links = page_modules()
    for module in pages:
        for path, resource in module.ROUTES:
            app.add_route(BASE + path, resource)
    # The debtor's page is public and outside /portal: its link goes to debtors, not users.
    for path, resource in debtor_links.ROOT_ROUTES:
        app.add_route(path, resource)
    app.add_static_route(f"{BASE}/static", STATIC)
    # A sink is matched before static routes: it leaves the static prefix to them.
    app.add_sink(not_found, rf"{BASE}/(?!static/)")
