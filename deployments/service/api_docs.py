"""The API's own description, `/openapi.json`, `/docs` (Swagger UI) and `/redoc`, behind the API's token.

FastAPI serves these three without any dependency; with `UNICHUNK_API_TOKEN` set they would be the only
open routes besides the documented `/health` and `/metrics`. So the app is built without them and they
are added here with the same bearer check as the data routes (`unichunk.deployments.service.auth`): open
without a token, 401 without the right one. The Swagger page itself then needs the token too, so a browser
gets 401; `curl -H 'Authorization: Bearer ...' /openapi.json` serves the schema to tools.
"""

from __future__ import annotations

from collections.abc import Callable

from fastapi import Depends, FastAPI, Request
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from fastapi.responses import HTMLResponse, JSONResponse

OPENAPI_URL = "/openapi.json"
# The app's constructor arguments that turn FastAPI's own (unauthenticated) description routes off.
WITHOUT_OPEN_DOCS = {"docs_url": None, "redoc_url": None, "openapi_url": None}


def add_api_docs(app: FastAPI, auth: Callable[[Request], None]) -> None:
    """Serve the OpenAPI description, Swagger UI and ReDoc on `app`, each behind `auth`."""
    guarded = [Depends(auth)]

    @app.get(OPENAPI_URL, include_in_schema=False, dependencies=guarded)
    def openapi() -> JSONResponse:
        return JSONResponse(app.openapi())

    @app.get("/docs", include_in_schema=False, dependencies=guarded)
    def swagger() -> HTMLResponse:
        return get_swagger_ui_html(openapi_url=OPENAPI_URL, title=f"{app.title} - Swagger UI")

    @app.get("/redoc", include_in_schema=False, dependencies=guarded)
    def redoc() -> HTMLResponse:
        return get_redoc_html(openapi_url=OPENAPI_URL, title=f"{app.title} - ReDoc")
