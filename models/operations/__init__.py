"""Operations: what an operator watches and does to the running service.

- `tables.py`: the table: each process's heartbeat.
- `heartbeats.py`: every API worker and consumer beating, and who is alive, dead or stopped.
- `state.py`: the service's state read at the moment it is asked for (scrape time, `svcctl
  status`): work in flight, backlogs, per-number pace, credits held, migrations pending.
- `rotation.py`: every stored secret re-encrypted under the first key (`svcctl secrets rotate`).

It reads every package below it, and is imported by none of them. This module imports none of
its modules, so importing one stays cheap.
"""
