"""Classifying botocore/s3transfer failures: transient (retry) or not-found (absent key)."""

from collections.abc import Iterator

from botocore.exceptions import ClientError, ConnectionError, HTTPClientError

_TRANSIENT_CODES = frozenset(
    {"SlowDown", "Throttling", "ThrottlingException", "RequestTimeout", "InternalError", "ServiceUnavailable",
     "ConditionalRequestConflict"}
)
_NOT_FOUND_CODES = frozenset({"404", "NoSuchKey", "NotFound"})


def _causes(exc: BaseException) -> Iterator[BaseException]:
    """The exception and everything behind it: boto3 re-raises ClientErrors as
    S3UploadFailedError (implicit __context__) and s3transfer keeps `last_exception`."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__ or getattr(current, "last_exception", None)


def is_transient(exc: BaseException) -> bool:
    for cause in _causes(exc):
        if isinstance(cause, (ConnectionError, HTTPClientError)):
            return True
        if isinstance(cause, ClientError):
            status = cause.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)
            return status >= 500 or cause.response.get("Error", {}).get("Code") in _TRANSIENT_CODES
    return False


def is_not_found(exc: ClientError) -> bool:
    return exc.response.get("Error", {}).get("Code") in _NOT_FOUND_CODES


def is_precondition_failed(exc: ClientError) -> bool:
    """A conditional write lost: the key exists (If-None-Match) or changed (If-Match)."""
    error = exc.response.get("Error", {})
    return error.get("Code") == "PreconditionFailed" or exc.response.get("ResponseMetadata", {}).get(
        "HTTPStatusCode") == 412
