"""Events: what the service tells companies, and the webhooks that carry it.

- `types.py`: every event the service posts, each as the model of the body it sends (the API
  document's `webhooks` section is built from them).
- `tables.py`: the tables: the outbox's events, webhook endpoints, their deliveries and every
  delivery attempt, with the event names and delivery statuses.
- `outbox.py`: an event written in the transaction of the change it reports, and the prompt
  fan-out asked for once that commits.
- `webhooks.py`: endpoints and their signing secrets, the fan-out of events into deliveries,
  claiming due deliveries and recording their attempts, replay and retention.
- `ssrf.py`: which webhook targets the service is willing to connect to.
- `delivery/`: the delivery engine: each endpoint's drain claims due deliveries, POSTs them
  through the pinned client and records the outcomes (its own `__init__` lists its modules).

This module imports none of them, so importing one stays cheap.
"""
