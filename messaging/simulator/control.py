"""The control endpoints: how tests, benchmarks, the service in simulator mode and `svcctl sim`
drive the platform. No version prefix, all JSON; each route reads its request and calls the same
operation `Simulator` offers in process.

    GET    /_sim/health          numbers, sends kept, sends throttled past a number's cap
    POST   /_sim/signup          {display_phone_number?, verified_name?, mps?} -> {code, waba_id,
                                 phone_number_id, display_phone_number}
    GET    /_sim/numbers         every number (its token only in process: Simulator.numbers())
    POST   /_sim/numbers/{id}    {mps?, quality_rating?, messaging_limit_tier?, blocked?}
                                 blocked: 368 | 131042 refuses every send of the number with that
                                 code (business account restricted, payment problem); null lifts it
    POST   /_sim/templates       {name, language, status?, category?, body?, header?, buttons?}
                                 buttons: [{type: URL, text, url (a dynamic one ends in {{1}})}
                                 | {type: QUICK_REPLY, text}]; a body or buttons given for an
                                 existing template replace its components (an edit)
    POST   /_sim/templates/quality   {name, language, quality: GREEN|YELLOW|RED|UNKNOWN}
    POST   /_sim/templates/category  {name, language, category}: the platform recategorises it
    POST   /_sim/templates/pause     {name, language}: quality RED, then paused (FIRST_PAUSE)
    POST   /_sim/templates/unpause   {name, language}: a paused template approved again
                                 (templates submitted through Graph are reviewed on their own,
                                 `review_delay` seconds after: template_review)
    GET    /_sim/sent            every accepted send (with a template's components); DELETE clears
    GET    /_sim/reads           every mark-as-read call (message_id, typing)
    POST   /_sim/inbound         {from | user_id, to: phone_number_id, text, name?, deliveries?}
    POST   /_sim/press           {wamid, index, deliveries?}: the user presses quick-reply button
                                 `index` of an accepted template send; the `button` message names
                                 it in `context`. `deliveries` (1 to 3, default 1): the same
                                 webhook posted that many times, as the platform redelivers
    POST   /_sim/echo            {from: phone_number_id, to: wa_id | user_id, text}
    POST   /_sim/fail            {mode: "500"|"timeout"|"off", seconds?, hang?}
    GET|POST /_sim/config        webhook_url, app_secret (set only; GET says app_secret_set), delivery
                                 delays, duplicate_rate, shuffle
    POST   /_sim/reset           forget numbers, codes, template changes, sends and failure modes
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from messaging.simulator import customers, messages, onboarding, phone_numbers, template_review, templates
from messaging.simulator.errors import ControlError
from messaging.simulator.platform import Platform


def handle(platform: Platform, method: str, path: str, body: Any) -> Any:
    """Answer one control call; a request whose fields have the wrong type is a 400."""
    try:
        return _route(platform, method, path, body)
    except (TypeError, ValueError) as exc:  # e.g. {"mps": "fast"}
        raise ControlError(400, f"invalid request: {exc}") from exc


def _route(platform: Platform, method: str, path: str, body: Any) -> Any:
    state = platform.state
    parts = [part for part in path.split("/") if part][1:]  # drop "_sim"
    args = body if isinstance(body, dict) else {}
    route = (method, parts[0] if parts else "")
    if route == ("GET", "health"):
        return state.health()
    if route == ("POST", "signup"):
        return onboarding.signup(
            platform, args.get("display_phone_number"), args.get("verified_name"), args.get("mps")
        )
    if route == ("GET", "numbers") and len(parts) == 1:
        # Over HTTP without their tokens: this endpoint answers anyone who can reach it.
        return {"data": [{key: value for key, value in number.items() if key != "token"}
                         for number in phone_numbers.every_number(state)]}
    if route == ("POST", "numbers") and len(parts) == 2:
        return phone_numbers.set_number(
            platform, parts[1], args.get("mps"), args.get("quality_rating"),
            args.get("messaging_limit_tier"), args.get("blocked", False),
        )
    if route == ("POST", "templates") and len(parts) == 2:
        return _template_health(platform, parts[1], args)
    if route == ("POST", "templates"):
        _require(args, "name", "language")
        options = {k: args[k] for k in ("status", "category", "body", "header", "reason", "buttons")
                   if args.get(k) is not None}
        return templates.set_template(platform, args["name"], args["language"], **options)
    if route == ("GET", "sent"):
        return {"data": state.sent_records()}
    if route == ("GET", "reads"):
        return {"data": state.read_records()}
    if route == ("DELETE", "sent"):
        state.clear_sent()
        return {"deleted": True}
    if route == ("POST", "inbound"):
        _require(args, "to", "text")
        return customers.inbound(platform, _opt_str(args.get("from")), str(args["to"]), str(args["text"]),
                                 args.get("name"), _opt_str(args.get("user_id")), _deliveries(args))
    if route == ("POST", "press"):
        _require(args, "wamid", "index")
        if not isinstance(args["index"], int):
            raise ControlError(400, "index must be an integer")
        return customers.press(platform, str(args["wamid"]), args["index"], _deliveries(args))
    if route == ("POST", "echo"):
        _require(args, "from", "text")
        return customers.echo(platform, str(args["from"]), _opt_str(args.get("to")), str(args["text"]),
                              _opt_str(args.get("user_id")))
    if route == ("POST", "fail"):
        _require(args, "mode")
        messages.fail(state, str(args["mode"]), float(args.get("seconds", 60)), args.get("hang"))
        return {"mode": args["mode"]}
    if route == ("POST", "reset"):
        return state.reset()
    if route == ("GET", "config"):
        return platform.config()
    if route == ("POST", "config"):
        platform.settings.configure(**args)
        return platform.config()
    raise ControlError(404, f"no {method} {path} in this simulator")


def _template_health(platform: Platform, action: str, args: Mapping[str, Any]) -> Any:
    _require(args, "name", "language")
    name, language = str(args["name"]), str(args["language"])
    if action == "quality":
        _require(args, "quality")
        return template_review.set_quality(platform, name, language, str(args["quality"]))
    if action == "category":
        _require(args, "category")
        return template_review.recategorise(platform, name, language, str(args["category"]))
    if action == "pause":
        return template_review.pause(platform, name, language)
    if action == "unpause":
        return template_review.unpause(platform, name, language)
    raise ControlError(404, f"no POST /_sim/templates/{action} in this simulator")


def _require(args: Mapping[str, Any], *names: str) -> None:
    missing = [name for name in names if args.get(name) in (None, "")]
    if missing:
        raise ControlError(400, f"missing field(s): {', '.join(missing)}")


def _opt_str(value: Any) -> str | None:
    return str(value) if value not in (None, "") else None


def _deliveries(args: Mapping[str, Any]) -> int:
    deliveries = args.get("deliveries", 1)
    if not isinstance(deliveries, int) or not 1 <= deliveries <= 3:
        raise ControlError(400, "deliveries must be an integer from 1 to 3")
    return deliveries
