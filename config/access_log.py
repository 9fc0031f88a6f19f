"""Gunicorn's logger for the API: its error and access lines in the service's log format, each
access line with the request's id (the response's X-Request-Id)."""

from __future__ import annotations

import logging

from gunicorn import glogging

from config.logs import TENANT_ENVIRON_KEY, ContextFilter, JsonFormatter, loggable_path
from config.settings import get_settings

# Apache's combined format and the request id, which is what matches a company's complaint to a line.
TEXT_ACCESS_FORMAT = '%(h)s %(l)s %(u)s %(t)s "%(r)s" %(s)s %(b)s "%(f)s" "%(a)s" %(L)ss rid=%({x-request-id}o)s'


def _header(resp, name: str) -> str | None:
    for key, value in resp.headers:
        if key.lower() == name:
            return value
    return None


class ServiceLogger(glogging.Logger):
    def setup(self, cfg):
        super().setup(cfg)
        self.json = get_settings().log_format == "json"
        for log in (self.error_log, self.access_log):
            for handler in log.handlers:
                handler.addFilter(ContextFilter())
                if self.json:
                    handler.setFormatter(JsonFormatter())

    def atoms(self, resp, req, environ, request_time):
        atoms = super().atoms(resp, req, environ, request_time)
        path = loggable_path(req.path)
        atoms.update({"r": f"{req.method} {path} {environ.get('SERVER_PROTOCOL', '')}", "U": path, "q": "",
                      "f": loggable_path(atoms.get("f", "-"))})  # the page before may be an invitation
        return atoms

    def access(self, resp, req, environ, request_time):
        if not self.access_log_enabled:
            return
        status = resp.status.split(None, 1)[0] if isinstance(resp.status, str) else resp.status
        path = loggable_path(req.path)
        if not self.json:
            # TEXT_ACCESS_FORMAT written directly: gunicorn's atoms copy every header and environ
            # variable of the request into a dict first, which cost more than the line itself.
            sent = getattr(resp, "sent", None)
            self.access_log.info(
                '%s - - %s "%s %s %s" %s %s "%s" "%s" %d.%06ds rid=%s', environ.get("REMOTE_ADDR", "-"), self.now(),
                req.method, path, environ.get("SERVER_PROTOCOL", ""), status, "-" if sent is None else sent,
                loggable_path(environ.get("HTTP_REFERER", "-")), environ.get("HTTP_USER_AGENT", "-"),
                request_time.seconds, request_time.microseconds, _header(resp, "x-request-id") or "-")
            return
        http = {"method": req.method, "path": path, "status": int(status),
                "bytes": getattr(resp, "sent", None), "duration_ms": round(request_time.total_seconds() * 1000, 2),
                "remote": environ.get("REMOTE_ADDR"), "user_agent": environ.get("HTTP_USER_AGENT")}
        self.access_log.log(logging.INFO, "%s %s %s", req.method, path, status,
                            extra={"request_id": _header(resp, "x-request-id"), "http": http,
                                   "tenant_id": environ.get(TENANT_ENVIRON_KEY)})
