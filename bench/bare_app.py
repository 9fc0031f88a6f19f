"""The baseline for bench/api: a bare Falcon endpoint answering a wallet-sized JSON body."""

import falcon
import orjson

BODY = orjson.dumps({"success": True, "data": {"balance": 1000, "reserved_balance": 0, "available_balance": 1000,
                                              "status": "active", "low_balance_threshold": 0}})


class Balance:
    def on_get(self, req, resp):
        resp.content_type = falcon.MEDIA_JSON
        resp.data = BODY


app = falcon.App()
app.add_route("/api/v1/credits/balance", Balance())
