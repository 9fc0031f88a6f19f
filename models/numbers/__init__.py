"""Numbers: the WhatsApp business numbers a company connects, and what the platform knows of them.

- `tables.py`: the tables: numbers (accounts), templates, customer windows, business-initiated
  sends, the platform's users, onboarding attempts, and the platform's webhook batches as
  received (applied by models/inbox/).
- `accounts.py`: numbers: finding them, pausing and resuming, pacing and daily limits, the
  24-hour customer windows and the users a number started a conversation with.
- `onboarding.py`: coexistence onboarding: `oba_` attempts, completed into an active number.
- `templates.py`: each number's templates kept in step with the platform.
- `template_rules.py`: the platform's rules for a new template, checked before submitting.
- `template_authoring.py`: templates written through the service: created (submitted for
  review) and deleted.
- `template_review.py`: the platform's review as its webhooks tell it (status, rejection reason,
  pause, quality, category), each change emitting `template.status_changed`.
- `platform_users.py`: WhatsApp users as the platform names them (phone, business-scoped id).
- `graph.py`: the process's Graph API client and a number's decrypted token.

This module imports none of them, so importing one stays cheap.
"""
