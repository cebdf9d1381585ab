"""Request bodies read without stalling the engine's event loop, where /health answers (routers time a
replica out on it).

FastAPI reads and validates a body on the event loop: 50 MB of `input_ids` held it for 30 s before the
request was refused. Here a body is a 413 naming the limit before it is parsed when it has too many bytes
(at once when its Content-Length says so, else as soon as the bytes streamed in pass the limit: the rest
is never read), or too many JSON values, lists and objects, or object members (rollout.protocol.BodyLimits).
A worker thread validates what is left, and a bad body is FastAPI's 422 naming the field.

A thread alone would not do: pydantic validates holding the GIL, so the loop waits for it all the same;
the counts keep that wait short. The thread serves the Python validators (one per sampling_params),
between which the loop runs.
"""

from __future__ import annotations

import asyncio
from typing import Any, TypeVar

from fastapi import Depends, HTTPException, Request
from fastapi.exceptions import RequestValidationError
from pydantic import TypeAdapter, ValidationError

from rollout.protocol import BodyLimits

T = TypeVar("T")


def json_body(kind: type[T], limits: BodyLimits, limit_source: str) -> Any:
    """The default of a route's parameter that receives the body as a `kind`; `limit_source` says in the 413
    what sets the limits."""
    adapter = TypeAdapter(kind)

    def too_large(amount: str, most: str) -> HTTPException:
        return HTTPException(status_code=413, detail=f"request body: {amount}; this engine takes at most {most} per "
                                                     f"request ({limit_source})")

    def validate(body: bytes) -> T:
        # Every JSON value but the outermost follows a comma or an opening bracket, every list and object opens
        # with one, every member has a colon: counting those (scans of the bytes, milliseconds) bounds each from
        # above (strings' own commas count too) before pydantic builds any.
        containers = body.count(b"[") + body.count(b"{")
        counts = (("JSON values", "its commas and brackets", 1 + body.count(b",") + containers, limits.values),
                  ("lists and objects", "their brackets", containers, limits.containers),
                  ("object members", "their colons", body.count(b":"), limits.members))
        for what, counted_by, amount, most in counts:
            if amount > most:
                raise too_large(f"{amount} {what} (by {counted_by})", f"{most} {what}")
        try:
            return adapter.validate_json(body)
        except ValidationError as error:  # located as FastAPI locates a body's fields
            raise RequestValidationError([{**e, "loc": ("body", *e["loc"])} for e in error.errors(include_url=False)]) from error

    async def parse(request: Request) -> T:
        declared = request.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > limits.bytes:
            raise too_large(f"{declared} bytes", f"{limits.bytes} bytes")
        chunks, size = [], 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > limits.bytes:
                raise too_large(f"over {limits.bytes} bytes", f"{limits.bytes} bytes")
            chunks.append(chunk)
        return await asyncio.to_thread(validate, b"".join(chunks))

    return Depends(parse)
