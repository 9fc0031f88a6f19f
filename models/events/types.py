"""Every event the service posts to webhook endpoints, each as the model of the body it sends.

A body model names its event in `event` (a one-value Literal) and lists exactly the fields the
producers write (`additionalProperties: false`): a field the payload carries only where it
applies is `absent_or_set()`, not required (and null only where its type says so). The API
document's `webhooks` section describes each event from its model. The running service knows
the events by name alone (tables.py: which the outbox accepts, which are enveloped, which POST
/webhooks/endpoints offers), so a new event is one model here, added to EVENT_TYPES, and its name
in tables.ALL_EVENTS; tests/test_openapi_document.py checks that the two lists agree.

Core events are flat objects with `event` first; receivables events (`debt.*`) are enveloped,
`{id, event, created_at, data}`, as the contract shows for `debt.payment_received`.
"""

from __future__ import annotations

import datetime as dt
from typing import Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field

from models.events.tables import PAYMENT_METHODS


def _without_default(schema: dict[str, Any]) -> None:
    # The Python default (None) stands for "absent"; the schema must not promise a null.
    schema.pop("default", None)


def absent_or_set(**options: Any) -> Any:
    """A field the payload leaves out where it does not apply: not required."""
    return Field(default=None, json_schema_extra=_without_default, **options)


# The models describe the bodies (the API document, the tests); nothing validates a payload with
# them as the service runs, and only the API's document imports this module. Their schemas are
# built when the document is first asked for, not at each API worker's start (about 20 ms).
DESCRIBED_ONLY = ConfigDict(extra="forbid", defer_build=True)


class EventBody(BaseModel):
    """The JSON body of a delivery: exactly these fields."""

    model_config = DESCRIBED_ONLY
    event: str


class EventData(BaseModel):
    model_config = DESCRIBED_ONLY


class Enveloped(EventBody):
    """The receivables events' shape: the fields in `data`, beside the event's id and time."""

    id: str = Field(description="the event's `evt_` id (also in X-Service-Event-Id)")
    created_at: dt.datetime
    data: EventData


def event_name(body: type[EventBody]) -> str:
    (name,) = get_args(body.model_fields["event"].annotation)
    return name


# -- account.* --------------------------------------------------------------------------------


class ConnectedAccount(EventData):
    id: str = Field(description="`wacc_` id")
    label: str | None
    external_reference: str | None
    phone_number: str | None
    connection_mode: Literal["coexistence", "internal"]
    status: Literal["active", "paused"]


class AccountConnected(EventBody):
    """A number completed onboarding and is active."""

    event: Literal["account.connected"]
    account: ConnectedAccount


class PausedAccount(EventData):
    id: str = Field(description="`wacc_` id")
    label: str | None
    external_reference: str | None
    phone_number: str | None
    status: Literal["paused"]


class AccountPaused(EventBody):
    """The platform blocked the number's business account.

    Its error was 368 (policy restriction) or 131042 (payment problem): the number is paused and
    its campaigns are held until an administrator resumes it."""

    event: Literal["account.paused"]
    account: PausedAccount
    reason: str = Field(description="`platform_blocked: ` and the platform's error")


# -- template.* -------------------------------------------------------------------------------


class TemplateStatusChanged(EventBody):
    """A template of the number changed: submitted for review, approved or rejected (with the
    platform's reason), paused or unpaused, recategorised, its quality rating moved, or deleted.

    Follows the platform's `message_template_status_update`, `message_template_quality_update`
    and `template_category_update` webhooks, and the service's own create and delete."""

    event: Literal["template.status_changed"]
    account_id: str = Field(description="`wacc_` id of the number the template belongs to")
    template_id: str | None = Field(description="the template's id on the platform")
    name: str
    language: str
    change: Literal["submitted", "status", "quality", "category", "deleted"] = Field(
        description="what changed: `submitted` (created through the service), `status`, `quality`, `category`, "
                    "`deleted`")
    status: str = Field(description="the status now: pending, approved, rejected, paused, disabled, deleted, ...")
    previous_status: str | None
    reason: str | None = Field(description="the platform's reason for a rejection (e.g. INVALID_FORMAT)")
    detail: str | None = Field(description="what the platform said about a pause, pacing or a disable")
    category: str | None
    previous_category: str | None = Field(description="the category before the platform recategorised it")
    quality_score: str | None = Field(description="GREEN, YELLOW, RED or UNKNOWN")
    timestamp: dt.datetime


# -- campaign.* -------------------------------------------------------------------------------


class CampaignEvent(EventBody):
    account_id: str
    campaign_id: str
    external_reference: str | None
    status: str
    total_recipients: int
    timestamp: dt.datetime


class CampaignCreated(CampaignEvent):
    """A campaign was created by POST /campaigns and queued."""

    event: Literal["campaign.created"]
    status: Literal["queued"]


class CampaignCompleted(CampaignEvent):
    """A campaign finished.

    `completed`: every recipient reached an outcome; `failed`: dispatch could not go on (the
    number disconnected, its token revoked) and the rest of its recipients failed."""

    event: Literal["campaign.completed"]
    status: Literal["completed", "failed"]


# -- message.* --------------------------------------------------------------------------------


class MessageEvent(EventBody):
    account_id: str
    campaign_id: str | None = Field(description="null for a single message")
    recipient: str = Field(description="the phone number, or the business-scoped user id it was sent to")
    external_contact_id: str | None
    wam_id: str | None
    status: str
    timestamp: dt.datetime
    recipient_id: str = absent_or_set(description="`rcp_` id: a campaign's message only")
    message_id: str = absent_or_set(description="`msg_` id: a single message only")


class MessageSent(MessageEvent):
    """The platform accepted the message (one credit consumed)."""

    event: Literal["message.sent"]
    status: Literal["sent"]


class MessageDelivered(MessageEvent):
    """The message reached the recipient's device."""

    event: Literal["message.delivered"]
    status: Literal["delivered"]


class MessageRead(MessageEvent):
    """The recipient read the message."""

    event: Literal["message.read"]
    status: Literal["read"]


class DeliveryError(EventData):
    code: str = Field(description="the platform's error code, or the service's (e.g. `account_disconnected`)")
    message: str


class MessageFailed(MessageEvent):
    """The message could not be sent or delivered.

    Its credit is released (refunded when the platform had accepted it)."""

    event: Literal["message.failed"]
    status: Literal["failed"]
    error: DeliveryError


class InboundMedia(EventData):
    id: str = absent_or_set(description="the platform's media id (download it through the Graph API)")
    mime_type: str = absent_or_set()
    filename: str = absent_or_set()


class ConversationMessage(EventBody):
    account_id: str
    type: str
    body: str | None
    wam_id: str
    timestamp: dt.datetime
    user_id: str = absent_or_set(description="the business-scoped user id")
    username: str = absent_or_set()


class MessageInboundCreated(ConversationMessage):
    """A customer wrote to the number."""

    event: Literal["message.inbound.created"]
    # `from` is a Python keyword; the alias is what goes on the wire.
    from_: str | None = Field(alias="from", description="the phone number, or the business-scoped user id "
                                                        "of a user who hides it")
    payload: str = absent_or_set(description="a quick-reply button's payload, or the chosen interactive reply's id")
    edited_wam_id: str = absent_or_set(description="the edited message's original id")
    media: InboundMedia = absent_or_set()
    context_wam_id: str = absent_or_set(description="the message this one answers")
    campaign_id: str = absent_or_set(description="the answered campaign message's campaign")
    recipient_id: str = absent_or_set(description="the answered campaign message's recipient")
    external_contact_id: str | None = absent_or_set(description="the answered campaign recipient's")
    debt_external_ids: list[str] = absent_or_set(description="the sender's open debts")


class MessageEchoCreated(ConversationMessage):
    """Someone replied from the business app (coexistence)."""

    event: Literal["message.echo.created"]
    direction: Literal["outgoing_from_business_app"]
    to: str | None


# -- debt.* -----------------------------------------------------------------------------------


class ReceivedPayment(EventData):
    boty_payment_id: str = Field(description="`bpay_` id")
    external_id: str | None
    transaction_id: str | None = Field(description="the payment gateway's id")
    monto: float
    moneda: str
    metodo: Literal[PAYMENT_METHODS]  # type: ignore[valid-type]
    pagado_en: dt.datetime


class PaymentReceivedData(EventData):
    deuda_external_id: str
    pago: ReceivedPayment
    saldo_pendiente: float
    status: Literal["pending", "partial", "overdue", "paid"]


class DebtPaymentReceived(Enveloped):
    """A payment made inside the service was applied to a debt.

    The payment came through the payment gateway or was registered by an administrator; payments
    the ERP reports are never echoed back. Sent to the company's payment endpoint (set in the
    portal or with `svcctl cartera endpoint set`), with the first attempt and 5 retries."""

    event: Literal["debt.payment_received"]
    data: PaymentReceivedData


# -- debt.promise_made, debt.disputed: what a debtor says (the debtor's page, WhatsApp replies) --


class PromiseMadeData(EventData):
    deuda_external_id: str
    promised_date: dt.date = Field(description="the day the debtor will pay by (the company's day)")
    amount: float = absent_or_set(description="what the promise covers: the debt's balance when promised")
    moneda: str = absent_or_set(description="the currency of `amount`")
    origin: Literal["page", "whatsapp"] = Field(description="where the debtor promised")


class DebtPromiseMade(Enveloped):
    """A debtor promised to pay a debt by a date, on their page or with a reminder's quick reply.

    Collection leaves the debt alone until that day has passed; a later promise replaces it."""

    event: Literal["debt.promise_made"]
    data: PromiseMadeData


class DisputedData(EventData):
    deuda_external_id: str
    reason: str = Field(description="the debtor's reason (1 to 500 characters)")
    origin: Literal["page", "whatsapp"] = Field(description="where the debtor disputed it")


class DebtDisputed(Enveloped):
    """A debtor disputed a debt, on their page or with a reminder's quick reply.

    Collection sends the debt no reminder while the dispute is open."""

    event: Literal["debt.disputed"]
    data: DisputedData
# -- debt.* from dunning plans (models/receivables/dunning_events.py) ---------------------------


class PromiseBrokenData(EventData):
    deuda_external_id: str
    promised_date: dt.date
    saldo_pendiente: float
    moneda: str


class DebtPromiseBroken(Enveloped):
    """The day a debtor promised to pay a debt by has passed and the debt is still owed.

    Sent once per promise, on the company's day after the promised date; the debt's dunning plan
    then reminds it again."""

    event: Literal["debt.promise_broken"]
    data: PromiseBrokenData


class EscalatedData(EventData):
    deuda_external_id: str
    plan_id: str = Field(description="the dunning plan's `dpl_` id")
    dias: int = Field(description="the plan's last step, in days from the due date")
    last_reminder_at: dt.datetime = Field(description="when the last step's reminder was handed to its campaign")
    saldo_pendiente: float
    moneda: str


class DebtEscalated(Enveloped):
    """A debt's dunning plan has run out of steps and the debt is still owed.

    Sent once per debt, on the company's day after its plan's last step was sent, when the plan
    escalates (`escalar`)."""

    event: Literal["debt.escalated"]
    data: EscalatedData


# Every event the outbox records, in the order they are listed to companies.
EVENT_TYPES: tuple[type[EventBody], ...] = (
    AccountConnected,
    AccountPaused,
    TemplateStatusChanged,
    CampaignCreated,
    CampaignCompleted,
    MessageSent,
    MessageDelivered,
    MessageRead,
    MessageFailed,
    MessageInboundCreated,
    MessageEchoCreated,
    DebtPaymentReceived,
    DebtPromiseMade,
    DebtDisputed,
    # dunning plans
    DebtPromiseBroken,
    DebtEscalated,
)


class WebhookPing(EventBody):
    """The test event.

    `svcctl webhooks test` sends it to an endpoint whatever the endpoint subscribed to; it is not
    recorded and never retried."""

    event: Literal["webhook.ping"]
    id: str = Field(description="a fresh `evt_` id")
    endpoint_id: str
    timestamp: dt.datetime
