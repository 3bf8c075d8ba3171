"""The operator UI's frame: its templates, and the wrappers every UI page and command
goes through.

:func:`guarded` makes a page (GET) that needs a login; :func:`command` makes a command
(POST) that also needs one of the server's own origins and the login's form token
(:mod:`oncegraph.server.forms`), and acts once per form
(:mod:`oncegraph.server.idempotency`). :func:`render` fills a template for a logged-in
operator; :func:`_to_run` goes back to a run's page with a message shown once (a signed
cookie, :mod:`oncegraph.server.flash`). The pages themselves: :mod:`oncegraph.server.ui`
and its ``ui_*`` neighbours.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

import jinja2
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response

from oncegraph.errors import OnceGraphError
from oncegraph.runs.signing import UI_FORMS
from oncegraph.server import bodies, compensation, flash, forms
from oncegraph.server.auth import Principal
from oncegraph.server.context import caller, key_of, masked_message, served
from oncegraph.server.idempotency import once, with_body
from oncegraph.server.problems import ApiError, from_exception
from oncegraph.server.wording import for_operator
from oncegraph.storage.records import now

TEMPLATES = Path(__file__).parent / "templates"

_env = jinja2.Environment(
    loader=jinja2.FileSystemLoader(TEMPLATES),
    autoescape=jinja2.select_autoescape(("html",)),
    undefined=jinja2.StrictUndefined,
)


def _pretty(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True, default=repr)


def _when(ts: Any) -> str:
    import datetime

    if not isinstance(ts, (int, float)):
        return ""
    return datetime.datetime.fromtimestamp(ts, datetime.UTC).strftime("%Y-%m-%d %H:%M:%S")


_env.filters["pretty"] = _pretty
_env.filters["words"] = lambda text: for_operator(text) if isinstance(text, str) else text
# Each form's own idempotency key, made per page: a form posted twice (a double click, a
# resend after a lost answer) acts once (oncegraph.server.idempotency).
_env.globals["request_key"] = lambda: secrets.token_urlsafe(18)
_env.filters["when"] = _when
_env.filters["q"] = lambda s: quote(str(s), safe="")


def page(name: str, http_status: int = 200, /, **values: Any) -> HTMLResponse:
    values.setdefault("csrf", "")
    return HTMLResponse(_env.get_template(name).render(**values), status_code=http_status)


async def _ui_key(request: Request) -> bytes:
    """The key of the UI's form tokens and flash messages (the same in every replica)."""
    return await served(request).graph.service.signing_key(UI_FORMS)


async def render(
    request: Request, me: Principal, name: str, http_status: int = 200, /, **values: Any
) -> HTMLResponse:
    """A page for a logged-in ``me``: its forms carry the login's token."""
    token = forms.token(await _ui_key(request), key_of(request, cookie=True) or "")
    values.setdefault("database_only", not served(request).has_code)
    values.setdefault("can_compensate", me.can(compensation.role(request)))
    return page(name, http_status, me=me, csrf=token, **values)


def _ui(request: Request) -> None:
    request.scope["oncegraph_ui"] = True


def _who(request: Request) -> Principal | None:
    try:
        return caller(request, cookie=True)
    except ApiError:
        return None


def _back(request: Request) -> str:
    """Where an error page links back to: the run's page, else the runs list; never a
    link the request brought (a ``Referer`` can be any site)."""
    run_id = request.path_params.get("run_id")
    return f"/ui/runs/{quote(str(run_id), safe='')}" if run_id else "/ui/runs"


def _own_origin(request: Request) -> bool:
    """Did the request come from one of this server's pages' origins?"""
    allowed: tuple[str, ...] = request.app.state.origins
    return forms.same_origin(request.headers, str(request.base_url), allowed)


FOREIGN = (
    "This request did not come from a page of this server, so nothing was done. If you "
    "sent it, open the page from this server, reload it and submit the form again."
)
STALE_FORM = (
    "This form is not one this server gave to your login (the page may be older than "
    "your login), so nothing was done. Reload the page and submit the form again."
)


async def _error_page(request: Request, me: Principal | None, exc: Exception) -> Response:
    api = from_exception(exc)
    assert api is not None
    values = {
        "status": api.status,
        "code": api.code,
        "message": for_operator(await masked_message(request, api.message)),
        "back": _back(request),
    }
    if me is None:
        return page("error.html", api.status, me=None, **values)
    return await render(request, me, "error.html", api.status, **values)


def guarded(handler: Callable[[Request, Principal], Awaitable[Response]]) -> Any:
    """A UI page (GET): logged in or sent to the login page; errors as an error page."""

    async def wrapped(request: Request) -> Response:
        _ui(request)
        principal = _who(request)
        if principal is None:
            return RedirectResponse("/ui/login?" + urlencode({"next": request.url.path}), 303)
        try:
            return await handler(request, principal)
        except (ApiError, OnceGraphError) as exc:
            return await _error_page(request, principal, exc)

    wrapped.__name__ = handler.__name__
    return wrapped


def command(
    handler: Callable[[Request, Principal, dict[str, str]], Awaitable[Response]],
    *,
    binds_run: bool = False,
) -> Any:
    """A UI command (POST): logged in, from one of the server's origins (checked before
    the body is read), with the login's form token (checked before the command is);
    else refused with a page that says to reload and submit again, nothing done. A
    form's own idempotency key (its hidden field, one per form per page) makes it act
    once however often it is posted (:func:`oncegraph.server.idempotency.once`);
    ``binds_run``: the command starts a run, bound to that key before it starts."""

    async def checked(request: Request, principal: Principal) -> Response:
        if not _own_origin(request):
            raise ApiError(403, "foreign_origin", FOREIGN)
        raw = await bodies.read(request)
        form = bodies.parse_form(raw)
        sent = form.pop(forms.FIELD, None)
        if not forms.token_ok(await _ui_key(request), key_of(request, cookie=True), sent):
            raise ApiError(403, "form_token", STALE_FORM)

        async def act(again: Request) -> Response:
            return await handler(again, principal, form)

        return await once(with_body(request, raw), principal, act, binds_run=binds_run, form=True)

    checked.__name__ = handler.__name__
    return guarded(checked)  # logged in, errors as an error page, as a page is


async def _to_run(request: Request, run_id: str, message: str) -> Response:
    """To the run's page, which shows ``message`` once (a signed cookie, not the URL)."""
    response = RedirectResponse(f"/ui/runs/{quote(run_id, safe='')}", status_code=303)
    sealed = flash.seal(
        await _ui_key(request), key_of(request, cookie=True) or "", run_id, message, at=now()
    )
    response.set_cookie(
        flash.COOKIE,
        sealed,
        max_age=int(flash.TTL),
        path="/ui/",
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
    )
    return response


def _given(body: dict[str, Any]) -> dict[str, Any]:
    """A command's body from a form: a field the form did not send is left out (a
    required one is then named as missing, not as the wrong type)."""
    return {name: value for name, value in body.items() if value is not None}


__all__ = ["FOREIGN", "STALE_FORM", "TEMPLATES", "command", "guarded", "page", "render"]
