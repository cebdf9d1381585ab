"""SGLang's `--api-key` semantics for every service of the rollout fleet: when a key is set, every route
but the health probes answers 401 without `Authorization: Bearer <key>`. `/health` stays open, as on
SGLang's server: routers and orchestrators probe it without credentials (SGLang's router's health check
sends none), and it tells nothing but that the service is up.

The key travels as $POSTTRAIN_API_KEY: a stage job started with it protects the engines and task
services it starts (they inherit it) and its clients send it; an SGLang server started with
`--api-key $POSTTRAIN_API_KEY` accepts the same header. Unset, nothing is checked: the services then
bind to loopback (the default) or a cluster-internal interface only.
"""

from __future__ import annotations

import hmac
import os

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

API_KEY_ENV = "POSTTRAIN_API_KEY"
OPEN_PATHS = ("/health",)  # SGLang's decide_request_auth leaves these (and /ready, /metrics) open too


def api_key() -> str | None:
    return os.environ.get(API_KEY_ENV) or None


def bearer_headers() -> dict[str, str]:
    """The header every request to a fleet service carries (none when no key is set)."""
    key = api_key()
    return {"Authorization": f"Bearer {key}"} if key else {}


def require_api_key(app: FastAPI, key: str | None) -> FastAPI:
    if not key:
        return app
    expected = f"Bearer {key}".encode()

    @app.middleware("http")
    async def check_bearer(request: Request, call_next):
        if request.url.path.startswith(OPEN_PATHS):
            return await call_next(request)
        if not hmac.compare_digest(request.headers.get("authorization", "").encode(), expected):
            return JSONResponse(status_code=401, content={"detail": "a bearer token is required (Authorization: Bearer <api key>)"})
        return await call_next(request)

    return app
