"""The API's own description, `/openapi.json` and `/docs` (Swagger UI), behind the API's token, offline.

FastAPI serves these without any dependency; with `UNICHUNK_API_TOKEN` set they would be the only open
routes besides the documented `/health` and `/metrics`. So the app is built without them and they are
added here behind the API's token check: open without a token, 401 without the right one. A browser
carries the token in the cookie `/ui/login` sets (`ui_auth`); a tool sends it as a bearer header.

Swagger UI's script and stylesheet come from the `swagger-ui-bundle-v2` package and are served here
(FastAPI's default page loads them from a CDN, a blank page offline). ReDoc has no packaged build, so
there is no `/redoc`: Swagger UI shows the same description.
"""

from __future__ import annotations

from fastapi import Depends, FastAPI, HTTPException
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import FileResponse, HTMLResponse, JSONResponse
from swagger_ui_bundle import swagger_ui_path

from unichunk.deployments.service.ui_auth import TokenCheck, browser_auth

OPENAPI_URL = "/openapi.json"
ASSETS = "/docs/assets"
# The Swagger UI files the page loads, served from the package (nothing else of it is reachable).
SWAGGER_FILES = {
    "swagger-ui-bundle.js": "text/javascript",
    "swagger-ui.css": "text/css",
    "favicon-32x32.png": "image/png",
}
# The app's constructor arguments that turn FastAPI's own (unauthenticated) description routes off.
WITHOUT_OPEN_DOCS = {"docs_url": None, "redoc_url": None, "openapi_url": None}


def add_api_docs(app: FastAPI, check: TokenCheck) -> None:
    """Serve the OpenAPI description and Swagger UI (with its assets) on `app`, each behind `check`
    (a bearer header or the UI's token cookie; a page request without either goes to the login)."""
    guarded = [Depends(browser_auth(check))]

    @app.get(OPENAPI_URL, include_in_schema=False, dependencies=guarded)
    def openapi() -> JSONResponse:
        return JSONResponse(app.openapi())

    @app.get("/docs", include_in_schema=False, dependencies=[Depends(browser_auth(check, redirect=True))])
    def swagger() -> HTMLResponse:
        return get_swagger_ui_html(
            openapi_url=OPENAPI_URL,
            title=f"{app.title} - Swagger UI",
            swagger_js_url=f"{ASSETS}/swagger-ui-bundle.js",
            swagger_css_url=f"{ASSETS}/swagger-ui.css",
            swagger_favicon_url=f"{ASSETS}/favicon-32x32.png",
        )

    @app.get(f"{ASSETS}/{{name}}", include_in_schema=False, dependencies=guarded)
    def swagger_asset(name: str) -> FileResponse:
        if name not in SWAGGER_FILES:
            raise HTTPException(404, "no such file")
        return FileResponse(str(swagger_ui_path / name), media_type=SWAGGER_FILES[name])
