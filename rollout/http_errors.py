"""422s that name the bad field and always serialize: FastAPI's default body echoes the input, and a
NaN or an infinity has no JSON form, so the error itself became a 500."""

from __future__ import annotations

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse


def install_validation_errors(app: FastAPI) -> FastAPI:
    @app.exception_handler(RequestValidationError)
    async def validation_error(request: Request, error: RequestValidationError) -> JSONResponse:
        detail = [{"loc": [str(part) for part in e["loc"] if not _union_member(part)], "msg": e["msg"], "type": e["type"],
                   "input": repr(e.get("input"))[:200]} for e in error.errors()]
        return JSONResponse(status_code=422, content={"detail": detail})

    return app


def _union_member(part) -> bool:
    """Pydantic names the member of a union it tried (`SamplingParams`, `list[int]`,
    `function-after[...]`) in an error's location; a client's field names are lower-case words."""
    return isinstance(part, str) and (part[:1].isupper() or "[" in part)
