"""Safe reading of user files (YAML or JSON) with size and expansion limits."""

from __future__ import annotations

import difflib
import json
import math
import re
from pathlib import Path
from typing import Any, Iterable, Mapping

import yaml

from .errors import BadInput

MAX_FILE_BYTES = 16 * 1024 * 1024  # a cluster, model or plan file is kilobytes; 16 MiB is generous
MAX_YAML_NODES = 200_000  # expanded node count; stops alias ("billion laughs") bombs
MAX_NUMBER = 1e15  # no dimension, count or rate in these files comes near; keeps float math finite


class _LimitedLoader(yaml.SafeLoader):
    """SafeLoader that refuses documents whose alias-expanded size exceeds MAX_YAML_NODES.

    Nodes are also counted while composing, so a huge flat document is refused after
    MAX_YAML_NODES nodes instead of being composed whole (the pure-Python composer is slow).
    """

    where = "YAML"
    composed = 0

    def compose_node(self, parent, index):  # noqa: D401 - PyYAML hook
        self.composed += 1
        if self.composed > MAX_YAML_NODES:
            raise BadInput(f"YAML holds more than {MAX_YAML_NODES} nodes", self.where)
        return super().compose_node(parent, index)


# Only JSON's types: no YAML 1.1 timestamps (`2024-01-01` stays the string it reads as), no
# `=` value key, and no base-60 numbers (YAML 1.1 reads `latency_us: 12:30` as 750): such a
# value stays a string, which the number check then refuses. Explicit tags for other types
# (!!set, !!binary, !!timestamp, !!omap, !!pairs) and unknown tags are refused with their line.
_JSON_LIKE_REFUSED = ("timestamp", "value", "int", "float")
_LimitedLoader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers
            if tag.rsplit(":", 1)[-1] not in _JSON_LIKE_REFUSED]
    for first, resolvers in _LimitedLoader.yaml_implicit_resolvers.items()}
# YAML 1.1's int and float forms less base 60; a float may also be written `1e3` (no dot),
# which YAML 1.1 reads as a string, as JSON and users do.
_LimitedLoader.add_implicit_resolver(
    "tag:yaml.org,2002:int",
    re.compile(r"""^(?:[-+]?0b[0-1_]+
                   |[-+]?0[0-7_]+
                   |[-+]?(?:0|[1-9][0-9_]*)
                   |[-+]?0x[0-9a-fA-F_]+)$""", re.X),
    list("-+0123456789"))
_LimitedLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"""^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+]?[0-9]+)?
                   |[-+]?(?:[0-9][0-9_]*)(?:[eE][-+]?[0-9]+)
                   |\.[0-9_]+(?:[eE][-+]?[0-9]+)?
                   |[-+]?\.(?:inf|Inf|INF)
                   |\.(?:nan|NaN|NAN))$""", re.X),
    list("-+0123456789."))


def _refuse_tag(loader: yaml.SafeLoader, node: yaml.Node):
    tag = node.tag.replace("tag:yaml.org,2002:", "!!")
    raise yaml.constructor.ConstructorError(
        None, None, f"{tag} values are not supported (only strings, numbers, true/false, null, lists "
        "and mappings)", node.start_mark)


for _tag in ("binary", "timestamp", "omap", "pairs", "set"):
    _LimitedLoader.add_constructor(f"tag:yaml.org,2002:{_tag}", _refuse_tag)
_LimitedLoader.add_constructor(None, _refuse_tag)


def _construct_mapping(loader: yaml.SafeLoader, node: yaml.MappingNode) -> dict:
    """A mapping whose explicit keys are unique (merged `<<` keys may be overridden)."""
    seen: set = set()
    for key_node, _ in node.value:
        if key_node.tag == "tag:yaml.org,2002:merge":
            continue
        key = loader.construct_object(key_node, deep=True)
        try:
            duplicate = key in seen
        except TypeError:  # a list or mapping as a key
            raise yaml.constructor.ConstructorError(None, None, "a key must be a string or number",
                                                    key_node.start_mark) from None
        if duplicate:
            raise yaml.constructor.ConstructorError(None, None, f"duplicate key {key!r}",
                                                    key_node.start_mark)
        seen.add(key)
    data: dict = {}
    yield data
    data.update(loader.construct_mapping(node))


_LimitedLoader.add_constructor("tag:yaml.org,2002:map", _construct_mapping)


class _LibyamlEvents(_LimitedLoader):
    """_LimitedLoader reading its events from libyaml (PyYAML's C parser), about three times
    faster on a large file; composing (with its node cap), resolving and constructing stay
    _LimitedLoader's."""

    def __init__(self, stream: str):
        self._events = yaml.cyaml.CParser(stream)
        yaml.composer.Composer.__init__(self)
        yaml.constructor.SafeConstructor.__init__(self)
        yaml.resolver.Resolver.__init__(self)

    def check_event(self, *choices):
        return self._events.check_event(*choices)

    def peek_event(self):
        return self._events.peek_event()

    def get_event(self):
        return self._events.get_event()

    def dispose(self) -> None:
        self._events.dispose()


_Loader = _LibyamlEvents if getattr(yaml, "__with_libyaml__", False) else _LimitedLoader


def _expanded_size(node: yaml.Node, where: str) -> int:
    memo: dict[int, int] = {}
    in_progress: set[int] = set()

    def size(current: yaml.Node) -> int:
        key = id(current)
        if key in memo:
            return memo[key]
        if key in in_progress:
            raise BadInput("recursive YAML alias", where)
        in_progress.add(key)
        total = 1
        if isinstance(current, yaml.SequenceNode):
            total += sum(size(child) for child in current.value)
        elif isinstance(current, yaml.MappingNode):
            total += sum(size(k) + size(v) for k, v in current.value)
        in_progress.discard(key)
        if total > MAX_YAML_NODES:
            raise BadInput(f"YAML expands to more than {MAX_YAML_NODES} nodes (alias bomb?)", where)
        memo[key] = total
        return total

    return size(node)


def read_text(path: str | Path, what: str = "file") -> str:
    """Read a small UTF-8 text file, with clear errors for missing, huge, binary or empty files."""
    p = Path(path)
    where = str(path)
    if not p.exists():
        raise BadInput(f"{what} not found", where)
    if not p.is_file():
        raise BadInput(f"{what} is not a regular file", where)
    size = p.stat().st_size
    if size > MAX_FILE_BYTES:
        raise BadInput(f"{what} is {size} bytes; the limit is {MAX_FILE_BYTES}", where)
    raw = p.read_bytes()
    if b"\x00" in raw:
        raise BadInput(f"{what} is binary, expected YAML or JSON text", where)
    try:
        text = raw.decode("utf-8-sig")  # a leading byte-order mark is not content
    except UnicodeDecodeError as exc:
        raise BadInput(f"{what} is not UTF-8 text (byte {exc.start})", where) from None
    if not text.strip():
        raise BadInput(f"{what} is empty", where)
    return text


def parse_structured(text: str, where: str) -> Any:
    """Parse JSON (if it looks like JSON) or YAML, safely."""
    stripped = text.lstrip()
    if where.endswith(".json") or stripped.startswith(("{", "[")):
        try:
            return _finite(json.loads(text, object_pairs_hook=lambda pairs: _unique(pairs, where)), where)
        except json.JSONDecodeError as exc:
            if where.endswith(".json"):
                raise BadInput(f"invalid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}", where) from None
        except (ValueError, RecursionError) as exc:  # a number of > 4300 digits; deep nesting
            raise BadInput(f"invalid JSON: {_short(exc)}", where) from None
    try:
        loader = _Loader(text)
        loader.where = where
        try:
            node = loader.get_single_node()
            if node is None:
                raise BadInput("file holds no document", where)
            _expanded_size(node, where)
            data = loader.construct_document(node)
        finally:
            loader.dispose()
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" at line {mark.line + 1} column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise BadInput(f"invalid YAML{at}: {problem}", where) from None
    except (ValueError, RecursionError) as exc:  # a number of > 4300 digits; deep nesting
        raise BadInput(f"invalid YAML: {_short(exc)}", where) from None
    return _finite(data, where)


def _unique(pairs: list[tuple[str, Any]], where: str) -> dict:
    """A JSON object whose keys are unique (json.loads keeps the last of duplicates silently)."""
    data = dict(pairs)
    if len(data) != len(pairs):
        seen: set[str] = set()
        key = next(k for k, _ in pairs if k in seen or seen.add(k))
        raise BadInput(f"duplicate key {key!r}", where)
    return data


def _finite(data: Any, where: str) -> Any:
    """`data` if it holds no NaN or infinity (JSON's NaN/Infinity, YAML's .nan/.inf, 1e999)."""
    todo: list[tuple[Any, str]] = [(data, "")]
    seen: set[int] = set()  # YAML aliases share containers
    while todo:
        value, path = todo.pop()
        if isinstance(value, float) and not math.isfinite(value):
            raise BadInput(f"must be a finite number, got {value!r}", where, path or None)
        if isinstance(value, (dict, list)) and id(value) not in seen:
            seen.add(id(value))
            items = value.items() if isinstance(value, dict) else enumerate(value)
            for key, child in items:
                todo.append((child, f"{path}[{key}]" if isinstance(value, list)
                             else f"{path}.{key}" if path else str(key)))
    return data


def json_text(data: Any, indent: int | None = 2) -> str:
    """The one way planner writes JSON: strict (NaN or infinity is an internal error, since every
    input figure is range-checked and no output may carry one), keys in insertion order."""
    try:
        return json.dumps(data, indent=indent, allow_nan=False)
    except ValueError as exc:
        raise AssertionError(f"a non-finite number reached the JSON output: {exc}") from None


def yaml_text(data: Any, **options: Any) -> str:
    """The one way planner writes YAML: as strict as json_text (a NaN or an infinity is an
    internal error, never a `.nan` a reader takes for a figure); `options` go to yaml.safe_dump."""
    _check_finite(data, "")
    return yaml.safe_dump(data, **options)


def _check_finite(data: Any, where: str) -> None:
    if isinstance(data, float) and not math.isfinite(data):
        raise AssertionError(f"a non-finite number reached the YAML output at {where or 'the top'}: {data}")
    if isinstance(data, dict):
        for key, value in data.items():
            _check_finite(value, f"{where}.{key}" if where else str(key))
    elif isinstance(data, (list, tuple)):
        for i, value in enumerate(data):
            _check_finite(value, f"{where}[{i}]")


def _short(exc: BaseException) -> str:
    if isinstance(exc, RecursionError):
        return "nested too deeply"
    return str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__


def load_mapping(path: str | Path, what: str = "file") -> dict:
    """Load a YAML/JSON file whose top level must be a mapping."""
    data = parse_structured(read_text(path, what), str(path))
    if not isinstance(data, dict):
        raise BadInput(f"{what} must hold a mapping at the top level, got {type(data).__name__}", str(path))
    return data


# --- typed field access with errors that name the field -------------------------------------


def check_keys(data: Mapping[str, Any], allowed: Iterable[str], where: str | None, path: str = "",
               what: str = "key") -> None:
    """BadInput unless every key of the mapping `data` (at `path` in `where`) is one of
    `allowed`: the first unknown key in file order, with the nearest allowed key as a hint.
    `what` names the keys in the message (a collective, a dtype)."""
    allowed = tuple(allowed)
    for key in data:
        if key not in allowed:
            raise BadInput(unknown_key(key, allowed, what), where, f"{path}.{key}" if path else str(key))


def unknown_key(key: Any, allowed: Iterable[str], what: str = "key") -> str:
    """The message for an unknown key: 'unknown key (did you mean bandwidth_GBps?)', or the
    known keys when none is near (difflib's ratio of at least 0.6)."""
    allowed = [str(a) for a in allowed]
    near = difflib.get_close_matches(str(key), allowed, n=1)
    if not near:  # a case slip (Bandwidth_gbps) is near too
        lower = {a.lower(): a for a in allowed}
        near = [lower[m] for m in difflib.get_close_matches(str(key).lower(), list(lower), n=1)]
    return f"unknown {what} (did you mean {near[0]}?)" if near else f"unknown {what} (known: {', '.join(allowed)})"


def get_str(data: dict, key: str, where: str, field: str, *, required: bool = True,
            default: str | None = None) -> str | None:
    if key not in data or data[key] is None:
        if required:
            raise BadInput("missing required field", where, field)
        return default
    value = data[key]
    if not isinstance(value, str) or not value.strip():
        raise BadInput(f"must be a non-empty string, got {value!r}", where, field)
    return value
