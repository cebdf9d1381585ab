"""SGLang's own HTTP contract types (`sglang.api.v1.api_types`), loaded without the rest of SGLang.

The test bootstrap installs SGLang's wheel without its dependencies (its server needs CUDA), plus msgspec;
importing `sglang` would run its package __init__, which pulls torch extensions and FlashInfer, so the one
module is loaded by its file path. `sglang_source` reads another of its files as text, for contracts (the
weight-update requests) whose module cannot be imported without those dependencies.
"""

from __future__ import annotations

import ast
import importlib.util
import sys
from dataclasses import dataclass
from functools import cache
from pathlib import Path


def sglang_root() -> Path:
    spec = importlib.util.find_spec("sglang")  # finds the package without running its __init__
    assert spec is not None and spec.submodule_search_locations, "sglang is not installed (see the Makefile's venv)"
    return Path(spec.submodule_search_locations[0])


@cache
def api_types():
    path = sglang_root() / "api" / "v1" / "api_types.py"
    spec = importlib.util.spec_from_file_location("sglang_api_v1_types", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # msgspec resolves the Structs' annotations through sys.modules
    spec.loader.exec_module(module)
    return module


def request_fields(relative_path: str, class_name: str) -> dict[str, bool]:
    """{field: required} of a request class in SGLang's source (e.g. srt/managers/io_struct.py)."""
    tree = ast.parse((sglang_root() / relative_path).read_text())
    node = next(n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == class_name)
    return {item.target.id: item.value is None for item in node.body
            if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name)}


@dataclass(frozen=True)
class ServerFlag:
    switch: bool  # a bool field: store_true, takes no value
    value_type: str  # the field's annotated type as written (int, float, str, Optional[str], ...)
    choices: tuple | None


def server_flags() -> dict[str, ServerFlag]:
    """The command-line flags of SGLang's server, as its source declares them (`srt/arg_groups/fields/*.py`: one
    annotated field per flag, `--` and the name with dashes unless `Arg(cli_name=...)`, bools as store_true).
    Read as source: importing SGLang's server arguments pulls in its CUDA dependencies (triton)."""
    flags = {}
    for path in sorted((sglang_root() / "srt" / "arg_groups" / "fields").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if not (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)
                    and isinstance(node.annotation, ast.Subscript) and getattr(node.annotation.value, "id", "") == "A"):
                continue
            value_type, meta = node.annotation.slice.elts[:2]
            options = {k.arg: k.value for k in meta.keywords} if isinstance(meta, ast.Call) else {}
            if "no_cli" in options and ast.literal_eval(options["no_cli"]):
                continue
            name = ast.literal_eval(options["cli_name"]) if "cli_name" in options else "--" + node.target.id.replace("_", "-")
            choices = options.get("choices")
            flags[name] = ServerFlag(ast.unparse(value_type) == "bool", ast.unparse(value_type),
                                     tuple(ast.literal_eval(choices)) if isinstance(choices, ast.List) else None)
    return flags
