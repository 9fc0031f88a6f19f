"""Receivables: a replica of companies' ERP debts, installments and payments, and collection on it.

- `tables.py`: the tables: debtors, debts, installments, payments and their allocations,
  reminders, the payment gateway's credentials, links, notifications, reversals and export, and
  the debtors' page links, openings, promises and disputes, their WhatsApp replies and the ERP's feed of them.
  the debtors' page links, promises and disputes, dunning plans and the debts they escalated.
- `money.py`: ISO 4217 currencies, their minor units, and exact conversions.
- `inputs.py`: the wire shapes of a debt, a payment and a resolution, and their exact parsing.
- `columns.py`: a block of CSV debts checked a column at a time (the importer's plain road).
- `importer.py`: the streaming import of CSV or JSON Lines debts from the ERP.
- `snapshots.py`: the ERP's debt snapshots written, in batches or as a block of new debts.
- `debts.py`: statuses, reads, payments recorded against a debt, resolutions, overdue.
- `reminders.py`: a settled debt's reminders withdrawn, the stages it will not get cancelled.
- `collection.py`: due reminders sent as campaigns, each debt following its dunning plan.
- `dunning_plans.py`: each company's dunning plans per segment, their validation and choice.
- `dunning_events.py`: promises broken and plans exhausted (`debt.promise_broken`, `debt.escalated`).
- `debt_reads.py`: a debt as the API reads it, from statements written once.
- `payments.py`: the payment gateway: credentials, links, notifications, reversals, reconciliation.
- `promises.py`: what a debtor says on their page or in WhatsApp: promises to pay by a date, and
  disputes (with their events).
- `quick_replies.py`: the reminder templates' quick-reply buttons: their words and payloads.
- `replies.py`: a debtor's WhatsApp replies: a quick reply recorded and answered, free text
  attached to their debts.
- `responses.py`: the ERP's feed of what debtors said: promises, disputes, payments claimed.
- `promises.py`: what a debtor says on their page: promises to pay by a date, and disputes; the company
  resolving a dispute.
- `debtor_links.py`: the debtor's page: its token per debtor and company, what it shows, paying
  from it, and the reminder's button that opens it.
- `report.py`: what the reminders recovered (the funnel per step and campaign), aging, DSO.
- `export.py`: the ERP's export of the payments and reversals made in the service.

This module imports none of them, so importing one stays cheap.
"""
