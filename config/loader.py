"""Load a YAML config into `Config`: ${ENV} substitution, strict decoding, cross-field checks.

Every error is a `ConfigError` whose message starts with the field path (`mirrors[3].partition: ...`)
so the CLI can print it as one line; errors about a field that appears in the file end with its
line number. Problems that have no field (unreadable file, YAML syntax, empty file) start with the
file name instead. A file with several problems is one `ConfigErrors` holding each (the CLI prints a
line each): every unknown key, value outside its choices and missing field the walk finds, and the
first other problem decoding meets.

Environment references, in string values only (never in keys):

- `${NAME}`: the variable's value; an error naming the field when NAME is not set.
- `${NAME:-default}`: the default when NAME is unset or empty (shell semantics).
- `$${`: a literal `${`.

A value that is exactly one reference takes the type the field expects, so `partition: ${PARTITION}`
with PARTITION=3 is the integer 3, while `topic: ${TOPIC}` with TOPIC=123 stays the string "123".
"""

from __future__ import annotations

import difflib
import logging
import os
import re
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import msgspec
import msgspec.inspect as mi
import yaml

from config.client_properties import LibraryCheck, client_properties_problem
from config.deprecated_keys import DEPRECATED_KEYS, Renamed, Retired
from config.errors import ConfigError, ConfigErrors, FieldPath, PathPart, YamlSyntaxError, format_path
from config.estate import check_offline, compile_entries
from config.model import (
    Config,
    GroupSelection,
    KafkaDestination,
    KafkaSecurity,
    OAuthAwsMskIam,
    OAuthClientCredentials,
    S3Destination,
    SaslConfig,
    SchemaRegistryConfig,
    SourceConfig,
)
from core.errors import first_line
from core.logs import log_event

T = TypeVar("T")
log = logging.getLogger("mirror_v3.config")

_ENV_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")
# One token of a string value: an escaped `$${`, a well-formed reference, or a stray `${`.
_ENV_TOKEN = re.compile(r"\$\$\{|" + _ENV_REF.pattern + r"|\$\{")
_MSGSPEC_ERROR = re.compile(r"^(?P<msg>.*?)(?: - at `\$(?P<path>[^`]*)`)?$", re.DOTALL)
_MSGSPEC_PATH_PART = re.compile(r"\.(?P<key>[^.\[]+)|\[(?P<index>\d+)\]|\[\.\.\.\]")
_MISSING_FIELD = re.compile(r"^Object missing required field `(?P<field>[^`]+)`$")
_UNKNOWN_FIELD = re.compile(r"^Object contains unknown field `(?P<field>[^`]+)`$")
_CLUSTER_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")  # as ClusterName in config.model
_MAX_YAML_NODES = 100_000  # alias expansion ("billion laughs") guard; real configs have hundreds

# Human wording for the pattern-constrained strings (the regex itself is in the schema).
_PATTERN_HINTS = {
    "name": "use letters, digits, '.', '_' and '-', starting with a letter or digit",
    "topic": "a Kafka topic name: letters, digits, '.', '_' and '-', not '.' or '..'",
    "destination-name-override": "one directory / key segment: letters, digits, '.', '_' and '-' "
    "(no '/'), not '.' or '..'",
}
# Valid `compression-level` per codec, as pyarrow accepts them; None = the codec takes no level.
_COMPRESSION_LEVELS: dict[str, tuple[int, int] | None] = {
    "zstd": (-131072, 22),
    "gzip": (1, 9),
    "lz4": (1, 12),
    "snappy": None,
    "none": None,
}


def parse_document(
    text: str, typ: type[T], top_keys: str, source: str = "<config>", env: Mapping[str, str] | None = None
) -> tuple[T, dict[FieldPath, int]]:
    """YAML text decoded strictly into `typ` (${ENV} substituted, errors naming the field path and line), with the
    line of each field for the caller's own checks. `top_keys` names the top-level keys, for the error when the
    document is not a mapping."""
    raw, lines = _load_yaml(text, source)
    if raw is None:
        raise ConfigError(source, "config file is empty")
    if not isinstance(raw, dict):
        raise ConfigError(source, f"top level must be a mapping with {top_keys}, not {_kind(raw)}")
    root = mi.type_info(typ)
    preparer = _Preparer(os.environ if env is None else env, lines)
    prepared = preparer.prepare(raw, (), root)
    return _convert(prepared, typ, preparer, lines, root), lines


def _convert(prepared: Any, typ: type[T], preparer: _Preparer, lines: dict[FieldPath, int], root: mi.Type) -> T:
    """`prepared` decoded into `typ`. Every problem of the file at once: those the walk found (unknown keys, values
    outside their choices, missing fields; each left out or stood in for, so that decoding goes on) and the first
    other one decoding meets, in the file's order (ConfigErrors, or the one ConfigError)."""
    try:
        decoded = msgspec.convert(prepared, typ)
    except msgspec.ValidationError as exc:
        found = _describe_validation_error(str(exc), prepared, lines, root)
        problems = preparer.problems
        # Not again what the walk found or took a key for; nor, beside it, one whose place decoding could not say.
        if found.where not in preparer.covered and (found.path or not problems):
            problems = [*problems, found]
        raise ConfigErrors.of(problems) from None
    if preparer.problems:
        raise ConfigErrors.of(preparer.problems)
    return decoded


def line_of(lines: dict[FieldPath, int], path: FieldPath) -> int | None:
    """The line of the field at `path` (or of its nearest parent), for errors about it."""
    return _line_of(lines, path)


def parse_config(
    text: str, source: str = "<config>", env: Mapping[str, str] | None = None, library_check: LibraryCheck | None = None
) -> Config:
    """Parse YAML text into a checked `Config`; `env` defaults to `os.environ`. `library_check` also checks each
    `client-properties` map with the client library (commands.config_files passes librdkafka's)."""
    raw, lines = _load_yaml(text, source)
    if raw is None:
        raise ConfigError(source, "config file is empty")
    if not isinstance(raw, dict):
        raise ConfigError(source, f"top level must be a mapping with `destination` and `mirrors`, not {_kind(raw)}")
    preparer = _Preparer(os.environ if env is None else env, lines)
    prepared = preparer.prepare(raw, (), _CONFIG_TYPE)
    _check_cluster_names(prepared, lines)
    config = _convert(prepared, Config, preparer, lines, _CONFIG_TYPE)
    _check_cross_fields(config, lines, library_check)
    check_spark_master(config.spark.master, lines)
    return config


# ---------------------------------------------------------------------------------------- YAML


def _load_yaml(text: str, source: str) -> tuple[Any, dict[FieldPath, int]]:
    """The document and the line of every mapping key / sequence item; rejects duplicate keys."""
    loader = yaml.SafeLoader(text)
    try:
        node = loader.get_single_node()
        lines: dict[FieldPath, int] = {}
        if node is not None:
            _index_nodes(node, (), lines, set(), [0])
        return (None if node is None else loader.construct_document(node)), lines
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
        at = None if mark is None else (mark.line + 1, mark.column + 1)
        raise YamlSyntaxError(source, _yaml_problem(exc), at) from None
    except RecursionError:
        raise ConfigError(source, "invalid YAML: nested too deeply") from None
    finally:
        loader.dispose()


def _yaml_problem(exc: yaml.YAMLError) -> str:
    problem = getattr(exc, "problem", None)
    context = getattr(exc, "context", None)
    if not problem:
        return first_line(exc)
    if context and not context.startswith("while "):
        return f"{context}, {problem}"  # e.g. "expected a single document in the stream, but found another document"
    context_mark = getattr(exc, "context_mark", None)
    problem_mark = getattr(exc, "problem_mark", None)
    if context and context_mark is not None and problem_mark is not None and context_mark.line != problem_mark.line:
        return f"{problem} ({context} at line {context_mark.line + 1})"  # where the unclosed [ or { began
    return str(problem)


def _index_nodes(
    node: yaml.Node, path: FieldPath, lines: dict[FieldPath, int], active: set[int], count: list[int]
) -> None:
    count[0] += 1
    if count[0] > _MAX_YAML_NODES:
        raise ConfigError(path, f"document too large (more than {_MAX_YAML_NODES} values after aliases)")
    if id(node) in active:
        raise ConfigError(path, "recursive YAML alias", _line_of(lines, path))
    if isinstance(node, yaml.MappingNode):
        active.add(id(node))
        seen: dict[tuple[str, str], int] = {}
        for key_node, value_node in node.value:
            if not isinstance(key_node, yaml.ScalarNode) or key_node.value == "<<":
                _index_nodes(value_node, path, lines, active, count)  # merge keys / complex keys
                continue
            line = key_node.start_mark.line + 1
            child = (*path, key_node.value)
            identity = (key_node.tag, key_node.value)
            if identity in seen:
                raise ConfigError(child, f"duplicate key (first at line {seen[identity]})", line)
            seen[identity] = line
            lines.setdefault(child, line)
            _index_nodes(value_node, child, lines, active, count)
        active.discard(id(node))
    elif isinstance(node, yaml.SequenceNode):
        active.add(id(node))
        for index, item in enumerate(node.value):
            child = (*path, index)
            lines.setdefault(child, item.start_mark.line + 1)
            _index_nodes(item, child, lines, active, count)
        active.discard(id(node))


# ------------------------------------------------------------------ substitution and pre-checks

_CONFIG_TYPE = mi.type_info(Config)


def _unwrap(typ: mi.Type | None) -> mi.Type | None:
    while isinstance(typ, mi.Metadata):
        typ = typ.type
    return typ


def _members(typ: mi.Type | None) -> list[mi.Type]:
    typ = _unwrap(typ)
    if typ is None:
        return []
    if isinstance(typ, mi.UnionType):
        return [m for t in typ.types for m in _members(t)]
    return [typ]


def _child_type(typ: mi.Type | None, part: PathPart) -> mi.Type | None:
    """The type expected at `part` inside a value of type `typ` (None: unknown / anything)."""
    for member in _members(typ):
        if isinstance(member, mi.StructType) and isinstance(part, str):
            for field in member.fields:
                if field.encode_name == part:
                    return field.type
        elif isinstance(member, mi.DictType) and isinstance(part, str):
            return member.value_type
        elif isinstance(member, (mi.ListType, mi.SetType, mi.FrozenSetType, mi.VarTupleType)) and isinstance(part, int):
            return member.item_type
    return None


def _type_at(path: FieldPath, root: mi.Type = _CONFIG_TYPE) -> mi.Type | None:
    typ: mi.Type | None = root
    for part in path:
        typ = _child_type(typ, part)
    return typ


def _chosen_struct(node: dict[Any, Any], members: list[mi.Type]) -> mi.StructType | None:
    """The one struct a mapping is decoded into, when it is known and refuses unknown keys: the only struct type of
    the field, or in a tagged union the one its tag names. None otherwise (a map, or a tag no type has: decoding
    reports that)."""
    if any(isinstance(m, mi.DictType) for m in members):
        return None
    structs = [m for m in members if isinstance(m, mi.StructType)]
    if any(m.tag_field is not None for m in structs):
        structs = [m for m in structs if m.tag_field is not None and node.get(m.tag_field) == m.tag]
    if len(structs) != 1 or not structs[0].forbid_unknown_fields:
        return None
    return structs[0]


def _field_names(struct: mi.StructType) -> list[str]:
    names = [f.encode_name for f in struct.fields]
    return [struct.tag_field, *names] if struct.tag_field else names


def _choices(members: list[mi.Type]) -> tuple[Any, ...] | None:
    """The values a field takes when it is one of a few (a Literal, perhaps nullable); None for any other field."""
    literals = [m for m in members if isinstance(m, mi.LiteralType)]
    if not literals or any(not isinstance(m, (mi.LiteralType, mi.NoneType)) for m in members):
        return None
    return tuple(value for literal in literals for value in literal.values)


def _unknown_field_problem(key: str, known: list[str]) -> str:
    """`unknown field; did you mean compression?`: the close known key, or the kebab-case spelling, or the list."""
    kebab = re.sub(r"[._]", "-", key).lower()
    close = difflib.get_close_matches(kebab, known, n=1, cutoff=0.8)
    if kebab in known:
        return f"unknown field; keys are kebab-case: did you mean {kebab}?"
    if close:
        return f"unknown field; did you mean {close[0]}?"
    return f"unknown field; expected one of: {', '.join(known)}" if known else "unknown field"


def _choice_problem(path: FieldPath, value: Any, choices: list[str]) -> str:
    """A value outside its field's choices: what to use instead (a refused value), the close choice, or the list."""
    refused = _REFUSED_VALUES.get((str(path[-1]) if path else "", str(value)))
    close = difflib.get_close_matches(str(value), choices, n=1, cutoff=0.8)
    if refused is not None:
        return f"{value} is not supported: {refused}"
    if close:
        return f"invalid value {_yaml_scalar(value)}: did you mean {close[0]}? (one of: {', '.join(choices)})"
    return f"invalid value {_yaml_scalar(value)}; expected one of: {', '.join(choices)}"


class _Preparer:
    """Walks the YAML data alongside the config types: substitutes ${ENV} and catches the mistakes
    msgspec would report without the exact path or a useful hint."""

    def __init__(self, env: Mapping[str, str], lines: dict[FieldPath, int]) -> None:
        self._env = env
        self._lines = lines
        # What the walk found and went on past: a key no type has (left out), a value outside its choices (stood in
        # for by the first choice), a required field missing. The loader reports them all, with decoding's own.
        self.problems: list[ConfigError] = []
        self.covered: set[FieldPath | str] = set()  # their places, and the keys an unknown one was taken for

    def _error(self, path: FieldPath, message: str) -> ConfigError:
        return ConfigError(path, message, _line_of(self._lines, path))

    def _found(self, path: FieldPath, message: str) -> None:
        self.problems.append(self._error(path, message))
        self.covered.add(path)

    def prepare(self, node: Any, path: FieldPath, typ: mi.Type | None) -> Any:
        members = _members(typ)
        if isinstance(node, dict):
            return self._prepare_mapping(node, path, members)
        if isinstance(node, list):
            return [self.prepare(item, (*path, i), _child_type(typ, i)) for i, item in enumerate(node)]
        if isinstance(node, str) and "${" in node:
            node = self._substitute(node, path, members)
        if isinstance(node, bool) and any(isinstance(m, mi.LiteralType) and "off" in m.values for m in members):
            node = "on" if node else "off"  # YAML 1.1 reads an unquoted off (or on) as a boolean
        choices = _choices(members)
        nullable = any(isinstance(m, mi.NoneType) for m in members)
        if choices is not None and node not in choices and not (node is None and nullable):
            self._found(path, _choice_problem(path, node, [str(c) for c in choices]))
            return choices[0]  # stands in, so that decoding goes on to the file's other problems
        if members and all(_is_str_type(m) or isinstance(m, mi.NoneType) for m in members):
            self._check_str(node, path, members)
        return node

    def _prepare_mapping(self, node: dict[Any, Any], path: FieldPath, members: list[mi.Type]) -> dict[Any, Any]:
        for key in node:
            if not isinstance(key, str):
                line = self._lines.get((*path, str(key))) or self._lines.get((*path, _yaml_scalar(key)))
                raise ConfigError(
                    path, f"key {_yaml_scalar(key)} is {_kind(key)}, not a string; quote it in YAML", line or None
                )
        tagged = [m for m in members if isinstance(m, mi.StructType) and m.tag_field is not None]
        if tagged and tagged[0].tag_field not in node:
            tags = ", ".join(str(m.tag) for m in tagged)
            raise self._error((*path, str(tagged[0].tag_field)), f"required field is missing; expected one of: {tags}")
        node = self._current_names(node, path, members)
        typ = mi.UnionType(tuple(members)) if members else None
        chosen = _chosen_struct(node, members)
        prepared: dict[Any, Any] = {}
        meant: set[str] = set()  # the known keys the unknown ones are taken for: not "missing" as well
        for key, value in node.items():
            child = _child_type(typ, key)
            if chosen is not None and key not in _field_names(chosen):
                problem = _unknown_field_problem(key, _field_names(chosen))
                self._found((*path, key), problem)
                taken = next((n for n in _field_names(chosen) if problem.endswith(f"did you mean {n}?")), None)
                if taken is not None and taken not in node and taken not in meant:
                    # Decoded as the key it was taken for, so that decoding goes on past it to the file's other
                    # problems (the file is refused whatever it finds); otherwise left out.
                    meant.add(taken)
                    prepared[taken] = self.prepare(value, (*path, taken), _child_type(typ, taken))
                continue
            # Otherwise an unknown key is left as is: msgspec reports it, and an ${ENV} inside it does not matter.
            prepared[key] = value if child is None else self.prepare(value, (*path, key), child)
        if chosen is not None:
            for field in chosen.fields:
                if field.required and field.encode_name not in node and field.encode_name not in meant:
                    where = (*path, field.encode_name)
                    self.problems.append(ConfigError(where, "required field is missing", _line_of(self._lines, path)))
            self.covered.update((*path, name) for name in meant)
            self.covered.update(
                (*path, f.encode_name) for f in chosen.fields if f.required and f.encode_name not in node
            )
        return prepared

    def _current_names(self, node: dict[Any, Any], path: FieldPath, members: list[mi.Type]) -> dict[Any, Any]:
        """The mapping with renamed keys under their new names and retired keys left out, one WARN for each."""
        structs = [m for m in members if isinstance(m, mi.StructType)]
        if any(m.tag_field is not None for m in structs):  # a tagged union: the struct the tag names
            structs = [m for m in structs if m.tag_field is not None and node.get(m.tag_field) == m.tag]
        changes = [change for struct in structs for change in DEPRECATED_KEYS.get(struct.cls, ())]
        for change in changes:
            if isinstance(change, Renamed) and change.old in node:
                old, new = (*path, change.old), (*path, change.new)
                if change.new in node:
                    raise self._error(
                        old, f"the old name of `{change.new}`, which is given too: keep only `{change.new}`"
                    )
                node = {change.new if key == change.old else key: value for key, value in node.items()}
                if old in self._lines:
                    self._lines[new] = self._lines[old]
                log_event(
                    log,
                    logging.WARNING,
                    "deprecated config key",
                    key=format_path(old),
                    use=format_path(new),
                    line=self._lines.get(old),
                )
            elif isinstance(change, Retired) and change.key in node:
                node = {key: value for key, value in node.items() if key != change.key}
                retired = (*path, change.key)
                log_event(
                    log,
                    logging.WARNING,
                    "retired config key ignored",
                    key=format_path(retired),
                    why=change.why,
                    line=self._lines.get(retired),
                )
        return node

    def _substitute(self, text: str, path: FieldPath, members: list[mi.Type]) -> Any:
        def replace(match: re.Match[str]) -> str:
            token = match.group(0)
            if token == "$${":
                return "${"
            name, default = match.group(1), match.group(2)
            if name is None:
                raise self._error(
                    path, "malformed environment reference; use ${NAME} or ${NAME:-default} (or $${ for a literal ${)"
                )
            value = self._env.get(name)
            if value:
                return str(value)
            if default is not None:
                return default
            if value is not None:
                return ""  # set but empty, no default
            raise self._error(path, f"environment variable {name} is not set (use ${{{name}:-default}} for a default)")

        value = _ENV_TOKEN.sub(replace, text)
        if _ENV_REF.fullmatch(text):
            return _coerce_whole_reference(value, members)
        return value

    def _check_str(self, value: Any, path: FieldPath, members: list[mi.Type]) -> None:
        nullable = any(isinstance(m, mi.NoneType) for m in members)
        if isinstance(value, str):
            pattern = next((m.pattern for m in members if isinstance(m, mi.StrType) and m.pattern), None)
            if pattern is not None and ("\n" in value or "\r" in value):
                raise self._error(path, f"invalid value {value!r}: must not contain a line break")
            return
        if value is None and nullable:
            return
        expected = "str | null" if nullable else "str"
        hint = "; quote the value in YAML to make it a string" if _is_scalar(value) and value is not None else ""
        raise self._error(path, f"Expected {expected}, got {_kind(value)} {_yaml_scalar(value)}{hint}".rstrip())


def _is_str_type(typ: mi.Type) -> bool:
    return isinstance(typ, mi.StrType)


def _coerce_whole_reference(value: str, members: list[mi.Type]) -> Any:
    """`${VAR}` alone becomes an int / float / bool when the field takes one and the value is one."""
    takes_int = any(isinstance(m, mi.IntType) for m in members)
    takes_float = any(isinstance(m, mi.FloatType) for m in members)
    takes_bool = any(isinstance(m, mi.BoolType) for m in members)
    if not (takes_int or takes_float or takes_bool):
        return value
    try:
        parsed = yaml.safe_load(value)
    except yaml.YAMLError:
        return value
    if isinstance(parsed, bool):
        return parsed if takes_bool else value
    if isinstance(parsed, int):
        return parsed if (takes_int or takes_float) else value
    if isinstance(parsed, float):
        return parsed if takes_float else value
    return value


def _check_cluster_names(data: dict[Any, Any], lines: dict[FieldPath, int]) -> None:
    """msgspec reports a bad map key without saying which; name it."""
    clusters = data.get("clusters")
    if not isinstance(clusters, dict):
        return
    for name in clusters:
        if not _CLUSTER_NAME.match(name):
            path = ("clusters", name)
            raise ConfigError(
                path,
                f"invalid cluster name {name!r}: use letters, digits, '.', '_' and '-', "
                "starting with a letter or digit",
                _line_of(lines, path),
            )


_LOCAL_MASTER = re.compile(r"^local(\[(\*|[1-9][0-9]*)(,[1-9][0-9]*)?\])?$")
_STANDALONE_MASTER = re.compile(r"^spark://[^\s/,:]+:[0-9]{1,5}(,[^\s/,:]+:[0-9]{1,5})*$")


def check_spark_master(master: str, lines: dict[FieldPath, int]) -> None:
    """spark.master names a master this process can drive (run's and restore's configs alike)."""
    path = ("spark", "master")
    if master.startswith("sc://"):
        raise ConfigError(
            path,
            f"Spark Connect ({master}) is not supported: mirror-v3 runs its Spark driver in its own process (the "
            "tasks return metadata to it, and it commits). Use local[*], or a standalone cluster's spark://host:port",
            _line_of(lines, path),
        )
    if not (_LOCAL_MASTER.match(master) or _STANDALONE_MASTER.match(master) or master.startswith("k8s://")):
        raise ConfigError(
            path,
            f"{master!r} is not a Spark master this process can use: local, local[N], local[*], "
            "spark://host:port[,host:port...] or k8s://...",
            _line_of(lines, path),
        )


# ------------------------------------------------------------------------------ error messages


def _line_of(lines: dict[FieldPath, int], path: FieldPath) -> int | None:
    for end in range(len(path), 0, -1):
        line = lines.get(path[:end])
        if line is not None:
            return line
    return None


def _parse_msgspec_path(text: str) -> FieldPath | None:
    parts: list[PathPart] = []
    position = 0
    while position < len(text):
        match = _MSGSPEC_PATH_PART.match(text, position)
        if match is None or match.group(0) == "[...]":
            return None
        parts.append(int(match.group("index")) if match.group("index") is not None else match.group("key"))
        position = match.end()
    return tuple(parts)


_MISSING = object()


def _value_at(data: Any, path: FieldPath) -> Any:
    for part in path:
        in_list = isinstance(part, int) and isinstance(data, list) and part < len(data)
        in_dict = isinstance(part, str) and isinstance(data, dict) and part in data
        if not (in_list or in_dict):
            return _MISSING
        data = data[part]
    return data


def _describe_validation_error(
    message: str, data: Any, lines: dict[FieldPath, int], root: mi.Type = _CONFIG_TYPE
) -> ConfigError:
    match = _MSGSPEC_ERROR.match(message)
    assert match is not None  # the pattern matches any string
    msg, raw_path = match.group("msg"), match.group("path") or ""
    path = _parse_msgspec_path(raw_path)
    if path is None:  # a shape we do not know: keep msgspec's own path
        return ConfigError(raw_path.lstrip(".") or "<root>", msg.replace("`", ""))
    if missing := _MISSING_FIELD.match(msg):
        field_path = (*path, missing.group("field"))
        return ConfigError(field_path, "required field is missing", _line_of(lines, path))
    if unknown := _UNKNOWN_FIELD.match(msg):
        field_path = (*path, unknown.group("field"))
        problem = _unknown_field_problem(unknown.group("field"), _known_fields(path, data, root))
        return ConfigError(field_path, problem, _line_of(lines, field_path))

    msg = msg.replace("`", "")
    value = _value_at(data, path)
    members = _members(_type_at(path, root))
    literal = next((m for m in members if isinstance(m, mi.LiteralType)), None)
    struct = next((m for m in members if isinstance(m, mi.StructType)), None)
    if path and path[-1] == "type" and struct is None:
        tags = [str(m.tag) for m in _members(_type_at(path[:-1], root)) if isinstance(m, mi.StructType) and m.tag]
        if tags:
            msg = f"{msg}; expected one of: {', '.join(tags)}"
    elif "matching regex" in msg and isinstance(path[-1] if path else None, str) and value is not _MISSING:
        pattern_hint = _PATTERN_HINTS.get(str(path[-1]))
        msg = f"invalid value {value!r}: {pattern_hint or msg}"
    elif msg.startswith("Invalid enum value") and literal is not None:
        choices = [str(v) for v in literal.values]
        if value is _MISSING:
            msg = f"{msg}; expected one of: {', '.join(choices)}"
        else:
            msg = _choice_problem(path, value, choices)
    elif value is not _MISSING and value is not None and _is_scalar(value):
        # `Expected int, got str '3'`; for a failed constraint `Expected int >= 1, got 0`.
        msg = f"{msg} {_yaml_scalar(value)}" if ", got " in msg else f"{msg}, got {_yaml_scalar(value)}"
    return ConfigError(path, msg, _line_of(lines, path))


# Values a user of Kafka's own tools may well write, which this product refuses on purpose: what to use instead.
_REFUSED_VALUES = {
    ("mechanism", "GSSAPI"): "the bundled Kafka client is built without Kerberos; use SCRAM-SHA-512, OAUTHBEARER "
    "(an OIDC token endpoint) or mutual TLS (security.protocol SSL with a client certificate)",
}


def _known_fields(path: FieldPath, data: Any, root: mi.Type = _CONFIG_TYPE) -> list[str]:
    structs = [m for m in _members(_type_at(path, root)) if isinstance(m, mi.StructType)]
    # In a tagged union (the destination), the keys that count are those of the chosen type.
    chosen = next(
        (m for m in structs if m.tag_field is not None and _value_at(data, (*path, m.tag_field)) == m.tag),
        structs[0] if structs else None,
    )
    return [] if chosen is None else _field_names(chosen)


def _is_scalar(value: Any) -> bool:
    return not isinstance(value, (dict, list))


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    return type(value).__name__


def _yaml_scalar(value: Any) -> str:
    if isinstance(value, (dict, list)):
        return ""
    if value is None:
        return ""
    if isinstance(value, str):
        return repr(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


# --------------------------------------------------------------------------- cross-field checks


def _check_cross_fields(config: Config, lines: dict[FieldPath, int], library_check: LibraryCheck | None) -> None:
    def error(path: FieldPath, message: str) -> ConfigError:
        return ConfigError(path, message, _line_of(lines, path))

    destination = config.destination
    if not isinstance(destination, KafkaDestination) and destination.compression_level is not None:
        levels = _COMPRESSION_LEVELS.get(destination.compression)
        if levels is None:
            raise error(
                ("destination", "compression-level"),
                f"compression {destination.compression!r} takes no level; remove compression-level",
            )
        low, high = levels
        if not low <= destination.compression_level <= high:
            raise error(
                ("destination", "compression-level"),
                f"{destination.compression} levels are {low}..{high}, got {destination.compression_level}",
            )

    if isinstance(destination, S3Destination) and (destination.access_key_id_env is None) != (
        destination.secret_access_key_env is None
    ):
        missing = "secret-access-key-env" if destination.secret_access_key_env is None else "access-key-id-env"
        raise error(("destination", missing), "set both access-key-id-env and secret-access-key-env, or neither")

    if isinstance(destination, S3Destination):
        if (bucket := s3_bucket_problem(destination.bucket)) is not None:
            raise error(("destination", "bucket"), bucket)
        s3_problem = s3_write_options_problem(destination)
        if s3_problem is not None:
            raise error(("destination", s3_problem[0]), s3_problem[1])

    table = None if isinstance(destination, KafkaDestination) else destination.table
    if table is not None:
        try:
            named = table.name.format(topic="t", dest="d")
        except (KeyError, IndexError, ValueError) as exc:
            raise error(
                ("destination", "table", "name"), f"a template of {{topic}} and {{dest}} only ({first_line(exc)})"
            ) from None
        if "." not in named.strip("."):
            raise error(("destination", "table", "name"), "a table name is `namespace.table`")
        if table.format == "delta" and table.catalog is not None:
            raise error(("destination", "table", "catalog"), "a delta table has no catalog: remove `catalog`")
        if table.format == "iceberg" and isinstance(destination, S3Destination) and table.catalog is None:
            raise error(
                ("destination", "table", "catalog"),
                "an S3 archive's table needs a catalog every process reaches (a SQLite file is one machine's): "
                "type sql with a database uri, rest, glue or hive",
            )

    if isinstance(destination, KafkaDestination):
        if destination.flush.daily:
            raise error(("destination", "flush", "daily"), "only files and objects are cut by day; remove it")
        for index, mirror in enumerate(config.mirrors):
            if mirror.flush is not None and mirror.flush.daily:
                raise error(("mirrors", index, "flush", "daily"), "only files and objects are cut by day; remove it")
        if config.defaults.flush is not None and config.defaults.flush.daily:
            raise error(("defaults", "flush", "daily"), "only files and objects are cut by day; remove it")
        problem = security_problem(destination.security)
        if problem is not None:
            raise error(("destination", "security", *problem[0]), problem[1])
        refused = client_properties_problem(destination.client_properties, "producer", library_check)
        if refused is not None:
            raise error(("destination", "client-properties", refused[0]), refused[1])
        if destination.sync_groups is not None:
            check_group_patterns(("destination", "sync-groups"), destination.sync_groups, error)
    elif destination.archive_groups is not None:
        check_group_patterns(("destination", "archive-groups"), destination.archive_groups, error)

    sources: list[tuple[FieldPath, SourceConfig]] = [(("clusters", name), c) for name, c in config.clusters.items()]
    sources += [(("mirrors", i, "source"), m.source) for i, m in enumerate(config.mirrors) if m.source is not None]
    for at, source in sources:
        problem = security_problem(source.security)
        if problem is not None:
            raise error((*at, "security", *problem[0]), problem[1])
        refused = client_properties_problem(source.client_properties, "consumer", library_check)
        if refused is not None:
            raise error((*at, "client-properties", refused[0]), refused[1])
    registries: list[tuple[FieldPath, SchemaRegistryConfig]] = [
        ((*at, "schema-registry"), source.schema_registry) for at, source in sources if source.schema_registry
    ]
    if isinstance(destination, KafkaDestination) and destination.schema_registry is not None:
        registries.append((("destination", "schema-registry"), destination.schema_registry))
    for at, registry in registries:
        problem = registry_problem(registry)
        if problem is not None:
            raise error((*at, *problem[0]), problem[1])
    for index, mirror in enumerate(config.mirrors):
        if mirror.schemas is None or not mirror.schemas.on:
            continue
        if isinstance(destination, KafkaDestination) and destination.schema_registry is None:
            raise error(
                ("destination", "schema-registry"), f"mirrors[{index}] copies schemas: give the destination's registry"
            )
        if mirror.source is not None:
            where: FieldPath = ("mirrors", index, "source")
            source_registry = mirror.source.schema_registry
        else:
            where = ("clusters", mirror.cluster or "")
            found = config.clusters.get(mirror.cluster or "")
            source_registry = None if found is None else found.schema_registry
        if source_registry is None:
            raise error((*where, "schema-registry"), f"mirrors[{index}] copies schemas: give its cluster's registry")
    if isinstance(destination, KafkaDestination) and destination.offsets == "preserve":
        # preserve keeps destination offset = source offset: an empty partition takes offset 0 first.
        if config.defaults.start_at not in (None, "earliest"):
            raise error(
                ("defaults", "start-at"), "a Kafka destination with offsets: preserve starts at earliest; use renumber"
            )
        for index, mirror in enumerate(config.mirrors):
            if mirror.start_at not in (None, "earliest"):
                raise error(
                    ("mirrors", index, "start-at"),
                    "a Kafka destination with offsets: preserve starts at earliest; use renumber",
                )
    try:
        check_offline(compile_entries(config))
    except ConfigError as exc:  # offline checks of the entries (FieldError, DestinationCollisionError)
        raise exc.at_line(None if exc.path is None else _line_of(lines, exc.path)) from None


# Storage classes whose objects must be restored before a GET: verify and restore could not read the chain.
_ARCHIVE_STORAGE_CLASSES = ("GLACIER", "DEEP_ARCHIVE")


def s3_bucket_problem(bucket: str) -> str | None:
    """What is wrong with a `bucket` written as a URL or a path (None: a bucket's name)."""
    name, _, prefix = bucket.removeprefix("s3://").removeprefix("s3a://").strip("/").partition("/")
    if bucket.startswith(("s3://", "s3a://")) or prefix:
        where = f", prefix: {prefix}" if prefix else ""
        return f"the bucket's name alone, not a URL or path: bucket: {name}{where}"
    return None


def s3_write_options_problem(destination: S3Destination) -> tuple[str, str] | None:
    """The first inconsistency of the encryption and storage-class keys (key, problem), if any."""
    if destination.sse_kms_key_id is not None and destination.server_side_encryption != "aws:kms":
        return "sse-kms-key-id", "needs server-side-encryption: aws:kms"
    if destination.storage_class in _ARCHIVE_STORAGE_CLASSES:
        return (
            "storage-class",
            f"{destination.storage_class} objects cannot be read back (verify, restore) without a restore request; "
            "use GLACIER_IR, or move old blobs with a lifecycle rule",
        )
    return None


def check_group_patterns(
    at: FieldPath, selection: GroupSelection, error: Callable[[FieldPath, str], ConfigError]
) -> None:
    """Every pattern of a group selection compiles (ConfigError at the first that does not)."""
    for key, patterns in (("groups", selection.groups), ("groups-exclude", selection.groups_exclude)):
        for index, pattern in enumerate(patterns):
            try:
                re.compile(pattern)
            except re.error as exc:
                raise error((*at, key, index), f"not a regular expression: {exc}") from None


def registry_problem(registry: SchemaRegistryConfig) -> tuple[FieldPath, str] | None:
    """What is wrong with a schema-registry block, as (path inside it, problem), or None."""
    if not registry.url.startswith(("http://", "https://")):
        return ("url",), f"{registry.url!r} is not an http:// or https:// URL"
    if registry.username is not None and registry.password_env is None:
        return ("password-env",), "basic authentication needs the variable holding the password"
    if registry.password_env is not None and registry.username is None:
        return ("username",), "basic authentication needs the user"
    if registry.bearer_token_env is not None and registry.username is not None:
        return ("bearer-token-env",), "either basic authentication (username) or a bearer token, not both"
    if registry.tls is not None and not registry.url.startswith("https:"):
        return ("tls",), "applies to an https url only"
    return None


def security_problem(security: KafkaSecurity) -> tuple[FieldPath, str] | None:
    """The first inconsistency between the protocol and the sasl / tls blocks, if any."""
    uses_sasl = security.protocol.startswith("SASL_")
    uses_tls = security.protocol in ("SSL", "SASL_SSL")
    if uses_sasl and security.sasl is None:
        return ("sasl",), f"protocol {security.protocol} needs a sasl block (mechanism, username, password-env)"
    if not uses_sasl and security.sasl is not None:
        return ("sasl",), f"protocol {security.protocol} does not use SASL; set protocol SASL_PLAINTEXT or SASL_SSL"
    if not uses_tls and security.tls is not None:
        return ("tls",), f"protocol {security.protocol} does not use TLS; set protocol SSL or SASL_SSL"
    if security.sasl is not None:
        problem = _sasl_problem(security.sasl, security.protocol)
        if problem is not None:
            return (("sasl", *problem[0]), problem[1])
    tls = security.tls
    if tls is not None:
        if (tls.cert_file is None) != (tls.key_file is None):
            missing = "key-file" if tls.key_file is None else "cert-file"
            return ("tls", missing), "mutual TLS needs both cert-file and key-file"
        if tls.key_password_env is not None and tls.key_file is None:
            return ("tls", "key-password-env"), "key-password-env without key-file"
    return None


_EXTENSION_KEY = re.compile(r"^[A-Za-z]+$")  # RFC 7628 §3.1
_EXTENSION_VALUE = re.compile(r"^[\x21-\x2b\x2d-\x7e]+$")  # printable ASCII; librdkafka separates them by ','


def _sasl_problem(sasl: SaslConfig, protocol: str) -> tuple[FieldPath, str] | None:
    """The first inconsistency between the mechanism and the keys it takes, if any."""
    if sasl.mechanism != "OAUTHBEARER":
        if sasl.oauthbearer is not None:
            return ("oauthbearer",), f"mechanism {sasl.mechanism} does not use tokens; set mechanism OAUTHBEARER"
        for key, value in (("username", sasl.username), ("password-env", sasl.password_env)):
            if value is None:
                return (key,), f"required field is missing (mechanism {sasl.mechanism})"
        return None
    for key, value in (("username", sasl.username), ("password-env", sasl.password_env)):
        if value is not None:
            return (key,), "mechanism OAUTHBEARER takes no user name or password; its oauthbearer block says how"
    oauth = sasl.oauthbearer
    if oauth is None:
        return ("oauthbearer",), "mechanism OAUTHBEARER needs an oauthbearer block (method: client-credentials, " + (
            "unsecured-jwt or aws-msk-iam)"
        )
    if isinstance(oauth, OAuthAwsMskIam):
        if protocol != "SASL_SSL":
            return ("oauthbearer", "method"), f"aws-msk-iam needs protocol SASL_SSL (MSK's IAM port), not {protocol}"
        if oauth.role_session_name is not None and oauth.role_arn is None:
            return ("oauthbearer", "role-session-name"), "role-session-name without role-arn"
        if oauth.profile is not None and oauth.role_arn is not None:
            return ("oauthbearer", "profile"), "set only one of profile and role-arn"
    if isinstance(oauth, OAuthClientCredentials):
        for key, value in oauth.extensions.items():
            if not _EXTENSION_KEY.match(key) or key == "auth":
                return ("oauthbearer", "extensions", key), "an extension name is letters only, and not auth"
            if not _EXTENSION_VALUE.match(value):
                return ("oauthbearer", "extensions", key), "an extension value is printable ASCII without spaces or ','"
    return None
