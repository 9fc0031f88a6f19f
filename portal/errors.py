"""Domain errors as the portal says them, in the reader's language.

The domain's messages are English for the API and svcctl; a page says each error the portal's
forms can meet in its own words, chosen by the error's code, or for `validation_failed` by the
field its details name. An error none of them covers (the API's long tail, reachable from a page
only by a forged form) keeps the domain's English message inside a translated sentence.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from config.i18n import N_, PageLocale
from models.errors import DomainError
from models.tenancy.portal import MAX_PASSWORD, MIN_PASSWORD
from portal.labels import label_in

TITLES = {404: N_("Not found"), 409: N_("Not possible now")}
CHECK_THE_FORM = N_("Check the form")
NOT_HERE = N_("There is nothing here, or it belongs to another company.")

BY_CODE = {
    "invitation_not_found": N_("This invitation does not exist, was used already or has expired."),
    "invitation_used": N_("This invitation was used already."),
    "user_exists": N_("This email already has a portal user."),
    "last_owner": N_("A company keeps at least one owner."),
    "two_factor_required": N_("Your company requires two-factor sign-in, so it stays on."),
    "two_factor_not_enabled": N_("Turn on two-factor sign-in for yourself first."),
    "key_revoked": N_("This key is revoked already."),
    "endpoint_exists": N_("An active webhook endpoint with this URL exists already."),
    "endpoint_limit_reached": N_("A company has at most %(limit)s active webhook endpoints: disable one first."),
    "campaign_not_cancellable": N_("Only a queued campaign can be cancelled, and this one has started or ended."),
    "insufficient_credits": N_("The company has not enough credits for this: buy credits or send to fewer "
                               "recipients."),
    "wallet_paused": N_("The company's credits are paused: no campaign can be created now."),
    "template_not_approved": N_("This template cannot be sent now (paused, rated RED or not approved): the "
                                "campaign was not created and nothing was reserved."),
    "debt_not_payable": N_("This debt takes no payments: it is %(status)s."),
    "payment_currency_mismatch": N_("The debt is in %(debt_currency)s: record the payment in that currency."),
    "payment_gateway_unavailable": N_("The payment could not be opened right now. Try again in a few minutes."),
    "promise_date_out_of_range": N_("Choose a date after today and at most %(max_days)s days ahead."),
    "dispute_reason_invalid": N_("Tell us why, in at most %(max)s characters."),
    "debt_already_disputed": N_("This debt is disputed already: the company will answer you."),
}

BY_FIELD = {
    "email": N_("Enter a valid email address."),
    "role": N_("Choose one of the roles."),
    "password": N_("A password is %(min)s to %(max)s characters."),
    "language": N_("Choose one of the languages."),
    "url": N_("This URL cannot receive webhooks. It must start with https://, name a public host that "
              "resolves, and be at most 1000 characters."),
    "events": N_("Choose at least one event."),
    "scopes": N_("Choose at least one scope."),
    "allowed_ips": N_("Allowed IPs are IP addresses or CIDR blocks (203.0.113.7, 198.51.100.0/24), "
                      "separated by commas or spaces."),
    "rate_limit": N_("The rate limit is 1 to 1000000 requests a minute."),
    "monto": N_("Enter an amount greater than 0, with no more decimals than the currency has."),
    "metodo": N_("Choose one of the payment methods."),
}

FIELD_VALUES = {"password": {"min": MIN_PASSWORD, "max": MAX_PASSWORD}}

SOMETHING_ELSE = N_("The service did not accept this: %(reason)s")


@dataclass
class Said:
    """What an error page shows: its status, title and message (msgids and their values)."""

    status: int
    title: str
    message: str
    values: dict = field(default_factory=dict)


def said(error: DomainError, page_locale: PageLocale) -> Said:
    title = TITLES.get(error.status, CHECK_THE_FORM)
    if error.code in BY_CODE:
        values = dict(error.details)
        if "status" in values:
            values["status"] = label_in(page_locale, "debt", values["status"])
        return Said(error.status, title, BY_CODE[error.code], values)
    if error.status == 404:
        return Said(404, title, NOT_HERE)
    fields = error.details.get("errors") if isinstance(error.details.get("errors"), dict) else {}
    known = next((name for name in fields if name in BY_FIELD), None)
    if known is not None:
        return Said(error.status, title, BY_FIELD[known], FIELD_VALUES.get(known, {}))
    return Said(error.status, title, SOMETHING_ELSE, {"reason": error.message})
