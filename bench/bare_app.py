"""The baseline for bench/api: a bare Falcon endpoint answering a wallet-sized JSON body; and the
same endpoint with the service's request telemetry (request id, HTTP metrics), to price it alone."""

import falcon
import orjson

from api.operations import RequestTelemetry

BODY = orjson.dumps({"success": True, "data": {"balance": 1000, "reserved_balance": 0, "available_balance": 1000,
                                              "status": "active", "low_balance_threshold": 0}})


class Balance:
    def on_get(self, req, resp):
        resp.content_type = falcon.MEDIA_JSON
        resp.data = BODY


app = falcon.App()
app.add_route("/api/v1/credits/balance", Balance())


instrumented_app = falcon.App(middleware=[RequestTelemetry()])
instrumented_app.add_route("/api/v1/credits/balance", Balance())
