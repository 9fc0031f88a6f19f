"""Webhook delivery: what POSTs due deliveries to an endpoint.

- `client.py`: the pinned HTTP client and the signed POST;
- `ping.py`: the test event.

This module imports none of its submodules, so importing any of them stays cheap.
"""
