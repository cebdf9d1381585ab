"""A command's options derived from a pydantic model: each field is a flag once, in the model, with its
default and description; a Literal becomes a choice. The command receives the validated model, and a
value the model refuses is a usage error naming the flag."""

from __future__ import annotations

import functools
import inspect
import types
from collections.abc import Callable, Mapping
from enum import Enum
from typing import Literal, Optional, Union, get_args, get_origin  # noqa: UP035 (typer reads these forms)

import typer
from pydantic import BaseModel, ValidationError


def model_options(model: type[BaseModel], flags: Mapping[str, str] | None = None):
    """Decorate `command(params: model)` into a typer command taking one option per field of `model`
    (`--field-name`, or the name `flags` gives it)."""
    flags = dict(flags or {})

    def decorate(command: Callable[[BaseModel], None]) -> Callable[..., None]:
        parameters, annotations = [], {}
        for name, field in model.model_fields.items():
            flag = flags.get(name, "--" + name.replace("_", "-"))
            annotation = _cli_type(name, field.annotation)
            default = field.get_default(call_default_factory=True)
            option = typer.Option(default, flag, help=field.description or "")
            parameters.append(inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=option,
                                                annotation=annotation))
            annotations[name] = annotation

        @functools.wraps(command)
        def run(**values):
            values = {name: value.value if isinstance(value, Enum) else value for name, value in values.items()}
            try:
                params = model(**values)
            except ValidationError as error:
                raise typer.BadParameter("; ".join(_describe(e, flags) for e in error.errors())) from error
            return command(params)

        run.__signature__ = inspect.Signature(parameters)
        run.__annotations__ = annotations
        return run

    return decorate


def _cli_type(name: str, annotation):
    """The field's type as typer takes it: Literal choices as an Enum, optional kept optional."""
    args = get_args(annotation)
    if get_origin(annotation) in (Union, types.UnionType) and type(None) in args:
        inner = [arg for arg in args if arg is not type(None)]
        return Optional[_cli_type(name, inner[0])] if len(inner) == 1 else annotation  # noqa: UP045
    if get_origin(annotation) is Literal:
        return Enum(f"{name.title().replace('_', '')}Choice", {str(value): str(value) for value in args}, type=str)
    return annotation


def _describe(error: dict, flags: Mapping[str, str]) -> str:
    field = str(error["loc"][0]) if error["loc"] else ""
    flag = flags.get(field, "--" + field.replace("_", "-")) if field else "options"
    return f"{flag}: {error['msg']}" if field else error["msg"]
