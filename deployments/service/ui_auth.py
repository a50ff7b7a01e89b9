"""How a browser carries the API token: a cookie set by `/ui/login`, checked by the API's own bearer check.

Browsers send no `Authorization` header on navigation, so `/ui` and the OpenAPI pages also take the token
from an HttpOnly, SameSite=Strict cookie that the login form sets (SameSite=Strict: no other site's page
can make the browser send it). The cookie's value is checked by handing it to the bearer check of
`unichunk.deployments.service.auth` as the request's `Authorization` header: the one call into auth.py
(`principal_auth`), so a browser is the same principal as the token's API caller, refused alike (a revoked
token by the next page). Without any token that check admits everyone as the owner and no login is asked.
"""

from __future__ import annotations

from collections.abc import Callable
from urllib.parse import quote

from fastapi import HTTPException, Request

from unichunk.access import Principal
from unichunk.deployments.service.auth import principal_auth
from unichunk.tokens import Tokens

COOKIE = "unichunk_token"
LOGIN_PATH = "/ui/login"


class TokenCheck:
    """The API's bearer check (`auth.principal_auth`: the caller's principal, 401 when the token is missing
    or wrong, the owner while no token exists), and whether the service has a token at all, asked of the
    tokens themselves: asking the check would count and log a refusal for every view of the login form."""

    def __init__(self, tokens: Tokens) -> None:
        self._principal: Callable[[Request], Principal] = principal_auth(tokens)
        self.required: Callable[[], bool] = tokens.required

    def __call__(self, request: Request) -> Principal:
        return self._principal(request)


def with_bearer(request: Request, token: str) -> Request:
    """The same request as if it had carried `Authorization: Bearer <token>`."""
    headers = [(k, v) for k, v in request.scope["headers"] if k.lower() != b"authorization"]
    headers.append((b"authorization", b"Bearer " + token.encode("utf-8", "replace")))
    return Request({**request.scope, "headers": headers})


def token_check(tokens: Tokens) -> TokenCheck:
    """The API's bearer check for the pages (see `TokenCheck`)."""
    return TokenCheck(tokens)


def browser_auth(check: TokenCheck, *, redirect: bool = False) -> TokenCheck:
    """A dependency admitting a request whose bearer header or token cookie passes `check`. A refused
    page request (`redirect`) is sent to the login form, coming back to where it was going."""

    def admit(request: Request) -> Principal:
        cookie = request.cookies.get(COOKIE)
        asked = (
            request if request.headers.get("authorization") or not cookie else with_bearer(request, cookie)
        )
        try:
            return check(asked)
        except HTTPException as exc:
            if not redirect or exc.status_code != 401:
                raise
            target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
            # the cookie's token was refused (revoked since the login): the form says so, not just asks
            said = "&failed=1" if asked is not request else ""
            raise HTTPException(
                303,
                "log in first",
                headers={"Location": f"{LOGIN_PATH}?next={quote(target, safe='')}{said}"},
            ) from None

    return admit


def token_accepted(check: TokenCheck, request: Request, token: str) -> bool:
    """Whether `token` passes `check` (the login form's question)."""
    try:
        check(with_bearer(request, token))
    except HTTPException:
        return False
    return True


def token_required(check: TokenCheck) -> bool:
    """Whether the service has a token at all (else no login is asked)."""
    return check.required()
