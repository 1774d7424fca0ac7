"""The settings reference, docs/configuration.md, rendered from the ``Settings`` model's own fields.

``semcache config --markdown > docs/configuration.md`` writes it; tests/test_docs.py fails when the
file and the model differ, so a setting's description lives in one place: its ``Field``.
"""

from __future__ import annotations

import json
import types
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal, Union, get_args, get_origin

import annotated_types
from pydantic.fields import FieldInfo

from .settings import ENV_PREFIX, OLD_ENV_NAMES, Settings

REGENERATE = "semcache config --markdown > docs/configuration.md"

# Where each group of settings starts, in the model's order; a new setting joins its neighbours' group.
SECTIONS = {
    "config": "The configuration file",
    "host": "Serving",
    "backend": "Upstream",
    "data_dir": "Storage",
    "threshold": "Lookup",
    "embedding_model": "Embedding",
    "api_keys_file": "Access",
    "prices": "Reporting",
}

_INTRO = """\
# Configuration

Every setting can be given in four places; the first that names it wins:

1. a `semcache serve` flag, for the settings that have one;
2. an environment variable, `SEMCACHE_` and the name in capitals (`SEMCACHE_THRESHOLD=0.93`);
3. the YAML file named by `--config` or `SEMCACHE_CONFIG`, keys spelled with `_` or `-`;
4. the default below.

```yaml
# semcache.yaml: semcache serve --config semcache.yaml
upstream_url: http://127.0.0.1:8000/v1
threshold: 0.93
guards: [numbers, negation, antonyms, roles, literals, template, entities]
language_thresholds: {han: 0.99}
context_limits: {gpt-4o-mini: 128000}
```

Maps (`language_thresholds`, `context_limits`, `prices`, `embedding_routes`) are JSON in an
environment variable (`SEMCACHE_CONTEXT_LIMITS='{"gpt-4o-mini": 128000}'`) and mappings in the
file; `guards` is comma-separated in a variable (`SEMCACHE_GUARDS=numbers,negation`, or `none`).
A key in the file that is not a setting stops the start with one line that names the file, the
line and the closest setting (`semcache.yaml, line 3: unknown setting 'treshold' (did you mean
'threshold'?)`), and so does a YAML syntax error. A value out of its range stops it too, naming
where that value came from: the flag, the variable or the file and line (`invalid settings:
threshold from SEMCACHE_THRESHOLD: Input should be less than or equal to 1`). A `SEMCACHE_*`
variable that is not a setting is ignored, with a warning. `semcache config [--config FILE]`
prints the settings in force and where each one came from.

The admin key has no flag, so that it never shows in `ps`: set `SEMCACHE_ADMIN_KEY`, or
`admin_key` in the file. API keys, templates and per-namespace settings have their own files and
endpoints: see [security](security.md) and [operations](operations.md).
"""


def configuration_markdown(flags: Mapping[str, str]) -> str:
    """The whole page; ``flags`` maps each setting that ``semcache serve`` takes as a flag to it."""
    out = [
        f"<!-- Generated from semcache/settings.py by `{REGENERATE}`: edit the settings, not this page. -->",
        "",
        _INTRO,
    ]
    for name, field in Settings.model_fields.items():
        if name in SECTIONS:
            out += [f"## {SECTIONS[name]}", "", "| setting | default | values | what it does |", "|---|---|---|---|"]
        out.append(_row(name, field, flags.get(name)))
        if _last_of_section(name):
            out.append("")
    return "\n".join(out).rstrip("\n") + "\n"


def _last_of_section(name: str) -> bool:
    names = list(Settings.model_fields)
    position = names.index(name)
    return position + 1 == len(names) or names[position + 1] in SECTIONS


def _row(name: str, field: FieldInfo, flag: str | None) -> str:
    variables = [f"{ENV_PREFIX}{name.upper()}", *([OLD_ENV_NAMES[name]] if name in OLD_ENV_NAMES else [])]
    spellings = [f"`{name}`", *(f"`{variable}`" for variable in variables), *([f"`{flag}`"] if flag else [])]
    cells = ["<br>".join(spellings), format_default(field), _values(field), field.description or ""]
    return "| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |"


def format_default(field: FieldInfo) -> str:
    value = field.get_default(call_default_factory=True)
    return format_value(value)


def format_value(value: Any) -> str:
    """A value as a person would write it in the file or a variable."""
    if value is None:
        return "unset"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, float) and value.is_integer():
        return f"`{int(value)}`"
    if isinstance(value, Path):
        return f"`{value}`"
    if isinstance(value, list | tuple):
        return f"`{','.join(map(str, value))}`" if value else "`none`"
    if isinstance(value, dict):
        return f"`{json.dumps(value, separators=(', ', ': '), default=_plain)}`"
    if value == "":
        return '`""`'
    return f"`{value}`"


def _plain(value: Any) -> Any:
    return value.model_dump() if hasattr(value, "model_dump") else str(value)


def _values(field: FieldInfo) -> str:
    """The kind of value a setting takes, with its bounds."""
    annotation = field.annotation
    args = get_args(annotation)
    optional = get_origin(annotation) in (Union, types.UnionType) and type(None) in args
    if optional:
        annotation = next(arg for arg in args if arg is not type(None))
    if get_origin(annotation) is Literal:
        kind = ", ".join(f"`{choice}`" for choice in get_args(annotation))
    else:
        origin: Any = get_origin(annotation) or annotation
        kinds = {bool: "true or false", int: "integer", float: "number", str: "text", Path: "path", dict: "map"}
        kind = kinds.get(origin) or ("list" if origin is list else str(origin))
    bounds = [_bound(item) for item in field.metadata]
    return " ".join([kind, ", ".join(bound for bound in bounds if bound)]).strip()


def _bound(item: object) -> str:
    if isinstance(item, annotated_types.Ge):
        return f"≥ {_number(item.ge)}"
    if isinstance(item, annotated_types.Gt):
        return f"> {_number(item.gt)}"
    if isinstance(item, annotated_types.Le):
        return f"≤ {_number(item.le)}"
    if isinstance(item, annotated_types.Lt):
        return f"< {_number(item.lt)}"
    return ""


def _number(value: object) -> str:
    return f"{value:,}" if isinstance(value, int) else str(value)
