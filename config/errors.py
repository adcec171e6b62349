"""The configuration's error types: a problem a user fixes in the config file."""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass

from core.errors import EXIT_CONFIG, MirrorV3Error

PathPart = str | int
FieldPath = tuple[PathPart, ...]
_PLAIN_KEY = re.compile(r"^[A-Za-z0-9_-]+$")


class ConfigError(MirrorV3Error):
    """A configuration problem. `where` is a field path of the config file (a tuple, see `path`), or the name of
    what else was wrong: a file, an environment variable, a command-line option. `line` is the field's line in
    the file, where known."""

    exit_code = EXIT_CONFIG
    headline = "invalid config"

    def __init__(self, where: FieldPath | str, problem: str, line: int | None = None) -> None:
        self.where, self.problem, self.line = where, problem, line
        super().__init__(self._sentence())

    @property
    def path(self) -> FieldPath | None:
        return self.where if isinstance(self.where, tuple) else None

    def at_line(self, line: int | None) -> ConfigError:
        """The same error, naming the line of its field (a check that ran without the file's lines)."""
        if line is None or self.line is not None:
            return self
        located = copy.copy(self)
        located.line = line
        located.args = (located._sentence(),)
        return located

    def _sentence(self) -> str:
        place = format_path(self.where) if isinstance(self.where, tuple) else self.where
        return f"{place}: {self.problem}" + ("" if self.line is None else f" (line {self.line})")


class ConfigErrors(ConfigError):
    """Every problem found in one reading of a file (`errors`, each a ConfigError, in the file's order), so that
    one run of `validate` names them all. It stands as its first for `where`, `problem` and `line`; its text is one
    line per problem."""

    def __init__(self, errors: Sequence[ConfigError]) -> None:
        self.errors = tuple(errors)
        first = self.errors[0]
        super().__init__(first.where, first.problem, first.line)

    @staticmethod
    def of(errors: Sequence[ConfigError]) -> ConfigError:
        """The one error, or all of them, in the order of their lines (those without a line last)."""
        ordered = sorted(errors, key=lambda error: (error.line is None, error.line or 0))
        return ordered[0] if len(ordered) == 1 else ConfigErrors(ordered)

    def _sentence(self) -> str:
        return "\n".join(str(error) for error in getattr(self, "errors", ())) or super()._sentence()


class YamlSyntaxError(ConfigError):
    """The file is not YAML: `file`, where the parser stopped (`at`: line and column, where known) and why."""

    def __init__(self, file: str, reason: str, at: tuple[int, int] | None) -> None:
        self.file, self.reason, self.at = file, reason, at
        where = file if at is None else f"{file} line {at[0]} column {at[1]}"
        super().__init__(where, f"invalid YAML: {reason}")


class FieldError(ConfigError):
    """A problem with one field, found where the file's lines are not known (the loader adds the line)."""

    def __init__(self, path: FieldPath, problem: str) -> None:
        super().__init__(path, problem)


def format_path(path: FieldPath) -> str:
    """`mirrors[3].source.security`: keys joined by dots, list indexes in brackets."""
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        elif _PLAIN_KEY.match(part):
            out += f".{part}" if out else part
        else:
            out += f"[{json.dumps(part)}]"
    return out or "<root>"


@dataclass(frozen=True)
class SelectedPartition:
    """One (cluster, topic, partition) and the config entry that selected it."""

    index: int  # of the entry in `mirrors`
    cluster: str
    topic: str
    partition: int

    @property
    def field(self) -> str:
        return f"mirrors[{self.index}]"

    def __str__(self) -> str:
        return f"{self.field} ({self.cluster}: {self.topic}-{self.partition})"


class DestinationCollisionError(ConfigError):
    """Two selected source partitions would write the same destination partition or chain."""

    def __init__(self, first: SelectedPartition, second: SelectedPartition, destination: str, partition: int) -> None:
        self.first, self.second = first, second
        self.destination, self.partition = destination, partition
        if (first.cluster, first.topic, first.partition) == (second.cluster, second.topic, second.partition):
            problem = "selected twice"
            hint = "narrow one entry's selection (exclude-regex, partitions) or set enabled: false"
        else:
            problem = "would both write it"
            hint = "give one entry a destination-name rule (prefix, suffix or regex) that tells them apart"
        super().__init__(
            ("mirrors", second.index), f"destination {destination}/{partition}: {second} and {first} {problem}; {hint}"
        )


class MirrorLoopError(ConfigError):
    """A mirror reads from its destination cluster and writes a topic that this config reads again: every record
    would be copied over and over."""

    def __init__(self, index: int, topic: str, destination: str, selected_by: int) -> None:
        self.index, self.topic, self.destination, self.selected_by = index, topic, destination, selected_by
        again = "itself" if destination == topic else f"{destination!r}, which mirrors[{selected_by}] reads again"
        super().__init__(
            ("mirrors", index),
            f"reads {topic!r} from the destination cluster and writes it into {again}: a loop; "
            "mirror to another cluster, or give the copies a destination-name the selection excludes",
        )
