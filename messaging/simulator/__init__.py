"""A local stand-in for the messaging platform (`svcctl sim`): the Graph API subset the service
uses, over real HTTP, posting signed webhooks back to the service. Its modules, by what they
simulate:

- the Graph API it serves: `graph` (versions, routes, who may call what), `onboarding` (embedded
  signup, code exchange, app subscription, coexistence sync), `phone_numbers`, `messages` (sends,
  mark-as-read, outages), `templates` (the listing; templates added or changed), `template_review`
  (templates submitted, reviewed and deleted through Graph; recategorised, rated, paused and
  unpaused later), `template_checks` (a template send checked against its template);
- the webhooks it posts: `webhook_values` (what each one says), `webhook_sender` (batched, signed,
  duplicated, reordered and retried as the platform does);
- the other side of a number's chats: `customers` (a customer writes or presses a button, the
  business app answers);
- its control endpoints (`/_sim/...`): `control`;
- its state: `records` (numbers and templates), `users` (the users it makes up), `state` (what it
  knows, under one lock), `state_files` (kept on disk);
- the server: `server` (`Simulator`: the parts wired, the HTTP entry, the operations tests call in
  process; `serve_forever` for `svcctl sim`), `httpserver`, `platform` (the parts every behaviour
  is handed, and the settings), `errors`.

Where the next pieces go. More of what a debtor does: the operation in `customers`, its route in
`control`, the message in `webhook_values`. More of a template's life: the operation in
`template_review`, its route in `graph` or `control`, the webhook's value in `webhook_values`.

Like the rest of `messaging/`, it imports nothing of the service. Import each module by its path:
this file imports none of them.
"""
