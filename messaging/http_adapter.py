"""An HTTP adapter whose TLS settings are worked out once per origin, not once per request.

`requests` rebuilds a connection pool's key for every request (parsing the URL, asking the
filesystem whether the CA path is a directory) and re-checks the CA bundle on the pool's
connection each time (more `stat` calls). For a client that sends thousands of messages to one
origin with one fixed `verify`, both answers never change: they are kept per origin and pool.
Verification itself is untouched: the pool still verifies every new connection against the CA.
"""

from __future__ import annotations

from requests.adapters import HTTPAdapter


class PreparedTLSAdapter(HTTPAdapter):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._pool_keys: dict[tuple, tuple[dict, dict]] = {}

    def build_connection_pool_key_attributes(self, request, verify, cert=None):
        scheme, _, rest = request.url.partition("://")
        cache_key = (scheme.lower(), rest.split("/", 1)[0], verify, cert)
        known = self._pool_keys.get(cache_key)
        if known is None:
            if len(self._pool_keys) > 64:  # a client talks to a handful of origins
                self._pool_keys.clear()
            known = self._pool_keys[cache_key] = super().build_connection_pool_key_attributes(request, verify, cert)
        host_params, pool_kwargs = known
        return dict(host_params), dict(pool_kwargs)

    def cert_verify(self, conn, url, verify, cert):
        # The pool's CA settings are set on its first use and never change for the same verify/cert.
        if getattr(conn, "_prepared_tls", None) == (verify, cert):
            return
        super().cert_verify(conn, url, verify, cert)
        conn._prepared_tls = (verify, cert)
