"""A spec's text as a document: YAML or JSON read with bounds a hostile or mistaken file cannot get past.

PyYAML's safe loader shares one object for every alias of an anchor, so a file of nine nested anchors
nine aliases deep loads in microseconds and expands to 9⁹ values only when it is validated or written
out (an 8 GiB allocation). It also lets a later duplicate key win silently: two `sft:` sections and the
first is gone. Here a duplicate key is an error naming its line, and the document, with every alias
expanded, may hold at most MAX_VALUES values.
"""

from __future__ import annotations

import json

import yaml

MAX_SPEC_BYTES = 1 << 20  # a spec is a page of settings; a megabyte is far past any real one
MAX_VALUES = 100_000  # values in the document with aliases expanded; the small preset holds a few hundred
MAX_DEPTH = 64  # nesting; the deepest field of a real spec sits about six levels down


class SpecError(ValueError):
    """A spec that cannot be read or is not valid; the message names the file and each field's dotted path
    (or the line or limit at fault)."""


class _NoDuplicateKeysLoader(yaml.SafeLoader):
    """The safe loader, refusing a mapping that names a key twice (merge keys `<<:` may still override)."""

    def construct_mapping(self, node, deep=False):
        if isinstance(node, yaml.MappingNode):
            first_lines: dict = {}
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue
                key = self.construct_object(key_node, deep=True)
                if isinstance(key, (list, dict)):
                    continue  # unhashable: the base constructor refuses it, naming its line
                if key in first_lines:
                    raise yaml.constructor.ConstructorError(
                        None, None, f"duplicate key {key!r} (first on line {first_lines[key]}); the later one would "
                                    "silently replace it", key_node.start_mark)
                first_lines[key] = key_node.start_mark.line + 1
        return super().construct_mapping(node, deep=deep)


def read_document(text: str, source: str, *, json_text: bool) -> dict:
    """The mapping `text` holds, refused naming `source` and the line or limit at fault."""
    if len(text.encode("utf-8", errors="replace")) > MAX_SPEC_BYTES:
        raise SpecError(f"{source}: larger than {MAX_SPEC_BYTES:,} bytes, the most a spec may hold")
    kind = "JSON" if json_text else "YAML"
    try:
        document = json.loads(text, object_pairs_hook=_refusing_duplicates) if json_text else \
            yaml.load(text, Loader=_NoDuplicateKeysLoader)  # noqa: S506 - a SafeLoader subclass
    except (json.JSONDecodeError, yaml.YAMLError, SpecError) as error:
        raise SpecError(f"{source}: not valid {kind}: {_one_line(error)}") from None
    except RecursionError:
        raise SpecError(f"{source}: not valid {kind}: nested deeper than the parser follows") from None
    if not isinstance(document, dict):
        raise SpecError(f"{source}: a spec is a mapping with model, data and stages")
    _check_size(document, source)
    return document


def _one_line(error: Exception) -> str:
    """PyYAML's message spans lines with a caret under the text; the line and column say the same on one."""
    if isinstance(error, yaml.MarkedYAMLError) and error.problem_mark is not None:
        mark = error.problem_mark
        return f"line {mark.line + 1}, column {mark.column + 1}: {error.problem}"
    return str(error)


def _refusing_duplicates(pairs: list[tuple[str, object]]) -> dict:
    document: dict = {}
    for key, value in pairs:
        if key in document:
            raise SpecError(f"duplicate key {key!r}; the later one would silently replace the first")
        document[key] = value
    return document


def _check_size(document: object, source: str) -> None:
    """Counts values as serialising would meet them (an alias once per place it is used), stopping at the
    limit, so a bomb is refused after MAX_VALUES steps instead of being expanded."""
    count = 0
    pending = [(document, 0)]
    while pending:
        value, depth = pending.pop()
        count += 1
        if count > MAX_VALUES:
            raise SpecError(f"{source}: more than {MAX_VALUES:,} values once its YAML aliases are expanded; "
                                    "a spec that large is a mistake or an alias bomb")
        if depth > MAX_DEPTH:
            raise SpecError(f"{source}: nested deeper than {MAX_DEPTH} levels")
        children = value.values() if isinstance(value, dict) else value if isinstance(value, list) else ()
        pending.extend((child, depth + 1) for child in children)
