"""Webhook deliveries per second through the whole pipeline against a bare loop of the same POSTs.

    .venv/bin/python -m bench.webhooks [--events 3000] [--rounds 2] [--backlog 0]

A receiver runs in its own process (HTTPS on 127.0.0.1, a trustme certificate, keep-alive;
it counts requests and distinct event ids). Each round:

- bare: ENDPOINT_CONCURRENCY threads POST N signed bodies through the delivery client (the same
  pooled connections, address vetting and signing as deliveries), nothing else;
- pipeline: N message.sent events committed to the outbox as the sending engine writes them
  (untimed: that is the producer's transaction, printed apart), then, timed by wall clock and CPU
  alike, the fan-out and a drain of the endpoint until every delivery is recorded: claims, the
  HTTP, the attempt log, retries bookkeeping.

Both use the same client and the same concurrency; the ratio pipeline/bare is the cost of the
bookkeeping, printed by wall clock and by this process's CPU time per delivery (the receiver is
another process), the steadier figure on a shared machine. The pipeline's CPU is also split by
thread: the fan-out and the drain's own thread (claims, records) against the senders' threads,
whose work the bare loop's threads do alone. `--backlog N` first leaves N deliveries of another
company's endpoint waiting, as an endpoint that is down leaves its retries: what the drain of a
healthy one costs beside them. Storage is a fresh SQLite file unless SVC_DATABASE_URL is set.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import ssl
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import orjson
import requests

from bench.common import ROOT, free_port

STATS_PATH = "/_stats"


# --- the receiver (its own process) --------------------------------------------------------


def serve(port: int, cert: str, key: str) -> None:
    """A minimal HTTP/1.1 keep-alive receiver: answers 200 to every POST, counts event ids."""
    received = 0
    event_ids: set[str] = set()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal received
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                event_id = None
                for line in head.split(b"\r\n")[1:]:
                    name, _, value = line.partition(b":")
                    name = name.strip().lower()
                    if name == b"content-length":
                        length = int(value)
                    elif name == b"x-service-event-id":
                        event_id = value.strip().decode()
                if length:
                    await reader.readexactly(length)
                if head.startswith(b"GET " + STATS_PATH.encode()):
                    body = orjson.dumps({"received": received, "unique": len(event_ids)})
                else:
                    received += 1
                    if event_id:
                        event_ids.add(event_id)
                    body = b"ok"
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: "
                             + str(len(body)).encode() + b"\r\n\r\n" + body)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError, ssl.SSLError, ValueError):
            pass
        finally:
            writer.close()

    async def main() -> None:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(cert, key)
        server = await asyncio.start_server(handle, "127.0.0.1", port, ssl=context, backlog=256)
        async with server:
            await server.serve_forever()

    asyncio.run(main())


def start_receiver(workdir: Path) -> tuple[subprocess.Popen, int, str]:
    import trustme

    ca = trustme.CA()
    ca_path = workdir / "ca.pem"
    ca.cert_pem.write_to_path(str(ca_path))
    server_cert = ca.issue_cert("localhost", "127.0.0.1")
    cert_path, key_path = workdir / "cert.pem", workdir / "key.pem"
    server_cert.private_key_and_cert_chain_pem.write_to_path(str(cert_path))
    server_cert.private_key_pem.write_to_path(str(key_path))
    port = free_port()
    process = subprocess.Popen([sys.executable, "-m", "bench.webhooks", "--serve", str(port),
                                "--cert", str(cert_path), "--key", str(key_path)], cwd=ROOT)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            requests.get(f"https://127.0.0.1:{port}{STATS_PATH}", verify=str(ca_path), timeout=1)
            return process, port, str(ca_path)
        except requests.RequestException:
            time.sleep(0.05)
    process.kill()
    raise SystemExit("the receiver did not start")


def receiver_stats(port: int, ca_path: str) -> dict:
    return requests.get(f"https://127.0.0.1:{port}{STATS_PATH}", verify=ca_path, timeout=5).json()


# --- the two runs --------------------------------------------------------------------------


def install_settings(workdir: Path, ca_path: str):
    from config import load_settings, use_settings

    # A fresh data dir always (the queue file, the SQLite database); the outbox lives in
    # SVC_DATABASE_URL only when one is given on purpose.
    env = {"SVC_DATA_DIR": str(workdir / "data"), "SVC_WEBHOOK_ALLOW_PRIVATE": "true",
           "SVC_WEBHOOK_CA_BUNDLE": ca_path}
    if os.environ.get("SVC_DATABASE_URL"):
        env["SVC_DATABASE_URL"] = os.environ["SVC_DATABASE_URL"]
    settings = use_settings(load_settings(env))
    from models import setup
    from models.store import db

    setup.init_db(settings)
    db.upgrade()
    return settings


def bare_loop(url: str, secret: str, bodies: list[tuple[str, bytes]], concurrency: int) -> float:
    """The same signed POSTs through the same client at the same concurrency; returns seconds."""
    from models.events import ssrf
    from models.events.delivery.client import delivery_client, post_signed, vetted_addresses

    client = delivery_client()
    target = ssrf.parse_target(url)
    addresses = vetted_addresses(target)
    cursor = iter(range(len(bodies)))
    lock = threading.Lock()
    failures = []

    def worker() -> None:
        while True:
            with lock:
                index = next(cursor, None)
            if index is None:
                return
            event_id, body = bodies[index]
            response = post_signed(client, target, addresses, secret, event_id, "message.sent", body)
            if not response.ok:
                failures.append(response.error)

    started = time.perf_counter()
    threads = [threading.Thread(target=worker) for _ in range(concurrency)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - started
    if failures:
        raise SystemExit(f"bare loop: {len(failures)} failures, e.g. {failures[0]}")
    return elapsed


def write_events(tenant_id: int, count: int) -> None:
    """`count` message.sent events committed to the outbox the way the sending engine writes them
    (`emit_many`, one batch): the producer's cost, not the delivery's, so outside the timings."""
    from models.events.outbox import emit_many
    from models.store.db import atomic

    with atomic():
        emit_many(tenant_id, "message.sent", [sample(index) for index in range(count)])


def pipeline(endpoint_id: int) -> tuple[float, float, float, float]:
    """Fan out what the outbox holds and drain the endpoint; returns the total and the fan-out's
    seconds, and this thread's CPU seconds for the fan-out and for the whole (the rest of the
    process's CPU is the senders' threads)."""
    from jobs.webhooks import FAN_OUT_BATCH
    from models.events import webhooks
    from models.events.delivery.drain import drain
    from models.events.tables import WebhookDelivery

    started, cpu = time.perf_counter(), time.thread_time()
    while webhooks.fan_out(FAN_OUT_BATCH).events:
        pass
    fanned, fan_out_cpu = time.perf_counter() - started, time.thread_time() - cpu
    drain(endpoint_id, slice_seconds=3600)
    elapsed, thread_cpu = time.perf_counter() - started, time.thread_time() - cpu
    open_deliveries = WebhookDelivery.select().where((WebhookDelivery.endpoint == endpoint_id)
                                                     & (WebhookDelivery.status != "delivered")).count()
    if open_deliveries:
        raise SystemExit(f"pipeline: {open_deliveries} deliveries not delivered")
    return elapsed, fanned, fan_out_cpu, thread_cpu


def leave_waiting(url: str, count: int) -> None:
    """`count` deliveries of another company's endpoint, fanned out and never drained here."""
    from jobs.webhooks import FAN_OUT_BATCH
    from models.events import webhooks
    from models.tenancy.tenants import create_tenant

    other = create_tenant("Down Co")
    webhooks.create_endpoint(other.id, url, ["message.sent"])
    for start in range(0, count, 5000):
        write_events(other.id, min(5000, count - start))
    while webhooks.fan_out(FAN_OUT_BATCH).events:
        pass


def sample(index: int) -> dict:
    return {"account_id": "wacc_bench", "campaign_id": "cmp_bench", "recipient": f"57300{index:07d}",
            "external_contact_id": f"contact-{index}", "wam_id": f"wamid.bench{index}", "status": "sent",
            "timestamp": "2025-01-01T10:00:00Z"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=3000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--backlog", type=int, default=0, help="deliveries of another endpoint left waiting")
    parser.add_argument("--serve", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--cert", help=argparse.SUPPRESS)
    parser.add_argument("--key", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve(args.serve, args.cert, args.key)
        return

    workdir = Path(tempfile.mkdtemp(prefix="bench-webhooks-"))
    receiver, port, ca_path = start_receiver(workdir)
    try:
        install_settings(workdir, ca_path)
        import jobs.webhooks  # noqa: F401  (the queue's side, as in a worker: the fan-out nudge, requeues, metrics)
        from models.events import webhooks
        from models.events.delivery.client import ENDPOINT_CONCURRENCY
        from models.ids import new_id
        from models.store.db import connection
        from models.tenancy.tenants import create_tenant

        url = f"https://localhost:{port}/hooks"
        with connection():
            if args.backlog:
                leave_waiting(url, args.backlog)
            tenant = create_tenant("Bench Co")
            endpoint, secret = webhooks.create_endpoint(tenant.id, url, ["message.sent"])
            concurrency = ENDPOINT_CONCURRENCY
            bodies = [(new_id("evt_"), orjson.dumps({"event": "message.sent", **sample(index)}))
                      for index in range(args.events)]
            bare_loop(url, secret, bodies[:300], concurrency)  # warm-up: connections, TLS sessions
            bare_best = pipeline_best = bare_cpu = pipeline_cpu = outbox_cpu = float("inf")
            fan_out_time = 0.0
            split = (0.0, 0.0)  # the drain's thread's CPU, fan-out and the rest, in the cheapest round
            for _ in range(args.rounds):
                before = receiver_stats(port, ca_path)
                cpu = time.process_time()
                bare_best = min(bare_best, bare_loop(url, secret, bodies, concurrency))
                bare_cpu = min(bare_cpu, time.process_time() - cpu)
                middle = receiver_stats(port, ca_path)
                cpu = time.process_time()
                write_events(tenant.id, args.events)
                outbox_cpu = min(outbox_cpu, time.process_time() - cpu)
                # The same span as the wall clock: from the committed outbox to the last record.
                cpu = time.process_time()
                elapsed, fanned, fan_out_cpu, thread_cpu = pipeline(endpoint.id)
                spent = time.process_time() - cpu
                if spent < pipeline_cpu:
                    pipeline_cpu, split = spent, (fan_out_cpu, thread_cpu - fan_out_cpu)
                after = receiver_stats(port, ca_path)
                if middle["received"] - before["received"] != args.events:
                    raise SystemExit("the receiver did not get every bare POST")
                if (after["received"] - middle["received"], after["unique"] - middle["unique"]) != (
                        args.events, args.events):
                    raise SystemExit(f"pipeline: expected {args.events} distinct events exactly once, got {after}")
                if elapsed < pipeline_best:
                    pipeline_best, fan_out_time = elapsed, fanned
    finally:
        receiver.terminate()
        receiver.wait(timeout=10)

    bare_rate = args.events / bare_best
    pipeline_rate = args.events / pipeline_best
    engine = "postgresql" if os.environ.get("SVC_DATABASE_URL") else "sqlite"
    backlog = f", {args.backlog} deliveries of another endpoint waiting" if args.backlog else ""
    print(f"events per round:  {args.events}  (concurrency {concurrency}, {engine}, best of {args.rounds}{backlog})")
    print(f"bare signed POSTs: {bare_rate:8.0f} /s")
    print(f"pipeline:          {pipeline_rate:8.0f} deliveries/s  (fan-out {fan_out_time * 1000:.0f} ms of "
          f"{pipeline_best * 1000:.0f} ms)")
    print(f"CPU per delivery:  bare {bare_cpu / args.events * 1000:.3f} ms, pipeline "
          f"{pipeline_cpu / args.events * 1000:.3f} ms")
    fan_out_cpu, drain_cpu = split
    print(f"pipeline's CPU:    fan-out {fan_out_cpu / args.events * 1000:.3f} ms, the drain's thread (claims, records) "
          f"{drain_cpu / args.events * 1000:.3f} ms, the senders' threads "
          f"{(pipeline_cpu - fan_out_cpu - drain_cpu) / args.events * 1000:.3f} ms a delivery")
    print(f"outbox writes:     {outbox_cpu / args.events * 1000:.3f} ms CPU an event (before the pipeline, "
          "not in its figures)")
    print(f"ratio:             {pipeline_rate / bare_rate:8.2f} by wall clock, {bare_cpu / pipeline_cpu:.2f} by CPU "
          "(target 0.9)")


if __name__ == "__main__":
    main()
