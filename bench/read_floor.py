"""The floor of each read for `python -m bench.api --all`: bare Falcon running the SELECTs the
service runs for that read, through the same driver (sqlite3 or psycopg2), and writing the same
JSON document with orjson.

What a floor does per request, for the read its path and query string name:
1. runs each SELECT the service ran for that read, as the service's driver received it (SQL and
   parameters, captured by `bench.reads` from a warm request in-process), on a connection the
   worker opened once (psycopg2 in autocommit, as the service's reads outside a transaction);
2. reads every row and makes a dict of each (column names from the cursor), what the least a
   page-building read does with its rows;
3. writes the service's answer for that read, the same document, with orjson.

What it leaves out, on purpose: the key's check and the rate limits (no SQL on a warm request
anyway: keys are kept per process, the counters live in shared memory or Redis), scopes,
tenancy, input validation, the envelope's building and the request telemetry. So the floor is
the cost of the database and of the JSON alone; the ratio `floor / service` by CPU is how near
the service's own code comes to it. The document of reads is a pickle named by the environment
variable READ_FLOOR_PLAN, written by `bench.reads`: {"database": URL or SQLite path,
"pragmas": SQLite's, "reads": {path with query: ([(sql, params)], body bytes)}}.
"""

from __future__ import annotations

import os
import pickle
import threading

import falcon
import orjson

with open(os.environ["READ_FLOOR_PLAN"], "rb") as plan_file:
    PLAN = pickle.load(plan_file)

_local = threading.local()


def _connection():
    """The thread's connection, opened on its first request (after the fork; gunicorn's worker
    threads each get their own, as the service's per-thread connections), with the pragmas the
    service sets on SQLite."""
    conn = getattr(_local, "conn", None)
    if conn is not None:
        return conn
    database = PLAN["database"]
    if database.startswith("postgres"):
        import psycopg2

        conn = psycopg2.connect(database)
        conn.autocommit = True
    else:
        import sqlite3

        conn = sqlite3.connect(database, isolation_level=None)
        for name, value in PLAN["pragmas"].items():
            conn.execute(f"PRAGMA {name} = {value}")
    _local.conn = conn
    return conn


# Each read's statements, and its document parsed once: the floor serializes it anew per request.
READS = {key: (statements, orjson.loads(body)) for key, (statements, body) in PLAN["reads"].items()}


class Floor:
    def __call__(self, req, resp, **_params):
        key = req.path + ("?" + req.query_string if req.query_string else "")
        read = READS.get(key)
        if read is None:
            raise falcon.HTTPNotFound()
        statements, document = read
        cursor = _connection().cursor()
        for sql, params in statements:
            cursor.execute(sql, params) if params else cursor.execute(sql)
            names = [column[0] for column in cursor.description]
            [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]
        resp.content_type = falcon.MEDIA_JSON
        resp.data = orjson.dumps(document)


app = falcon.App()
app.add_sink(Floor(), prefix="/api/v1")
