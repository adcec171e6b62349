"""Imports run downwards (docs/architecture.md): a module may import its own package and the packages below it,
never one above, and product code never imports the test tooling."""

from __future__ import annotations

import ast
import fnmatch
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# Bottom first.
LAYERS = ("core", "config", "kafka_clients", "telemetry", "sinks", "source", "workers", "supervisor", "commands")
# `python -m supervisor run` is the documented way in (fixed by the design), and the CLI lives above the runtime.
ENTRY_POINTS = {Path("supervisor/__main__.py")}
TOOLING = ("testkit", "bench", "tools", "tests", "e2e")
# What commands/ may import of supervisor/: the run process's entry (`run` starts a `Supervisor`).
RUN_PROCESS_ENTRY = "supervisor.app"


def imported_packages(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module.split(".")[0])
    return found


def test_no_layer_imports_one_above_it_or_the_test_tooling() -> None:
    wrong = []
    for rank, layer in enumerate(LAYERS):
        above = set(LAYERS[rank + 1 :]) | set(TOOLING)
        for path in sorted((ROOT / layer).rglob("*.py")):
            if path.relative_to(ROOT) in ENTRY_POINTS:
                assert imported_packages(path) <= {"core", "commands"}, path  # early signals, then the CLI only
                continue
            for package in sorted(imported_packages(path) & above):
                wrong.append(f"{path.relative_to(ROOT)} imports {package}")
    assert not wrong, "imports that run upwards:\n" + "\n".join(wrong)


def imported_modules(path: Path) -> set[str]:
    """The dotted names a module imports: `from a.b import c` names `a.b`, or `a.b.c` when `a.b` is a package of
    this repository (`c` may be one of its modules)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if ROOT.joinpath(*node.module.split("."), "__init__.py").is_file():
                found.update(f"{node.module}.{alias.name}" for alias in node.names)
            else:
                found.add(node.module)
    return found


def test_commands_need_of_supervisor_only_the_run_process_entry() -> None:
    # supervisor/ is the run process: whatever a one-shot command shares with `run` (errors described, versions,
    # discovery, metrics and the HTTP endpoint, starting Spark) lives in a layer below it.
    wrong = [
        f"{path.relative_to(ROOT)} imports {module}"
        for path in sorted((ROOT / "commands").rglob("*.py"))
        for module in sorted(imported_modules(path))
        if module.split(".")[0] == "supervisor" and module != RUN_PROCESS_ENTRY
    ]
    assert not wrong, f"commands/ may import {RUN_PROCESS_ENTRY} only of supervisor/:\n" + "\n".join(wrong)


def test_the_rule_is_checked_against_real_imports() -> None:
    # The check itself must see imports, including those under `if TYPE_CHECKING:`.
    assert {"config", "sinks", "source", "telemetry"} <= imported_packages(ROOT / "workers" / "partition_source.py")
    assert "config" in imported_packages(ROOT / "sinks" / "destinations.py")
    assert "pathlib" in imported_packages(ROOT / "commands" / "config_files.py")
    # ... and each module by its dotted name: the entry `run` imports inside a function, a module taken from its
    # package by name, a module imported whole.
    assert RUN_PROCESS_ENTRY in imported_modules(ROOT / "commands" / "cli.py")
    assert "core.early_signals" in imported_modules(ROOT / "supervisor" / "__main__.py")
    assert {"workers.spark_start", "core.describe"} <= imported_modules(ROOT / "commands" / "verify.py")
    assert "anyio.to_thread" in imported_modules(ROOT / "commands" / "verify.py")


def test_the_wheel_and_the_image_carry_the_product_layers_and_no_tooling() -> None:
    # The wheel's top-level packages as setuptools' packages.find picks them (namespaces on, its default: every
    # directory whose dotted name an include pattern matches), and the directories the image copies to install from.
    # e2e/test_release.py checks a built wheel; this is its fast half.
    include = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]["include"]
    directories = {path.name for path in ROOT.iterdir() if path.is_dir()}
    packaged = {name for name in directories if any(fnmatch.fnmatchcase(name, pattern) for pattern in include)}
    assert packaged == set(LAYERS), sorted(packaged ^ set(LAYERS))
    dockerfile = (ROOT / "Dockerfile").read_text().splitlines()
    copied = {line.split()[1] for line in dockerfile if line.startswith("COPY ") and "--from=" not in line}
    assert set(LAYERS) <= copied and not copied & set(TOOLING), sorted(copied)


# What config/ may not import: it parses and validates text it is given, and reaches no file, socket or broker.
IO_MODULES = {"pathlib", "io", "shutil", "socket", "ssl", "http", "urllib", "aiofiles", "aiokafka", "confluent_kafka"}
IO_MODULES |= {"aiobotocore", "botocore", "boto3", "asyncio", "anyio", "pyspark"}


def test_config_does_no_io() -> None:
    wrong = []
    for path in sorted((ROOT / "config").rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for package in sorted(imported_packages(path) & IO_MODULES):
            wrong.append(f"{path.relative_to(ROOT)} imports {package}")
        calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)]
        wrong.extend(f"{path.relative_to(ROOT)}:{n.lineno} calls open()" for n in calls if n.func.id == "open")  # type: ignore[attr-defined]
    assert not wrong, "I/O in config/:\n" + "\n".join(wrong)


def test_no_sink_reaches_the_source_cluster() -> None:
    # The supervisor hands a sink what it needs of the source (sinks.kafka.sink.SourceLookup); a sink that read the
    # mirror's source block could build a client of it.
    wrong = []
    for path in sorted((ROOT / "sinks").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Attribute) and node.attr in ("source", "source_field", "sources"):
                wrong.append(f"{path.relative_to(ROOT)}:{node.lineno} reads .{node.attr}")
    assert not wrong, "\n".join(wrong)


def test_product_code_waits_with_anyio_only() -> None:
    # Locks, timeouts, shared requests and task groups are anyio's. The one use of asyncio left is the event
    # loop's exception handler (core/logs.py quiets aiokafka's leaked-connection reports), which anyio has no
    # counterpart for.
    users = sorted(
        str(path.relative_to(ROOT))
        for layer in LAYERS
        for path in (ROOT / layer).rglob("*.py")
        if "asyncio" in imported_packages(path)
    )
    assert users == ["core/logs.py"]


def test_kafka_clients_own_the_aiokafka_clients() -> None:
    # One package builds aiokafka's clients (settings, timeouts, idempotence decided once), and one module touches
    # aiokafka's private API, so an aiokafka upgrade that changes it breaks in one place.
    built, private = [], []
    for layer in LAYERS:
        for path in sorted((ROOT / layer).rglob("*.py")):
            where = str(path.relative_to(ROOT))
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.Call) and getattr(node.func, "id", "").startswith("AIOKafka"):
                    built.append(f"{where}:{node.lineno}")
                if isinstance(node, ast.Attribute) and node.attr == "_client":
                    value = node.value
                    if not (isinstance(value, ast.Name) and value.id == "self"):
                        private.append(f"{where}:{node.lineno}")
    assert built and all(place.startswith("kafka_clients/") for place in built), built
    assert [place.split(":")[0] for place in private] == ["kafka_clients/clients.py"], private


def test_no_module_imports_itself_through_others() -> None:
    # A circle of imports (type-only ones included) means the modules in it cannot be read, tested or moved apart.
    modules: dict[str, set[str]] = {}
    for layer in LAYERS:
        for path in (ROOT / layer).rglob("*.py"):
            name = ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
            imported: set[str] = set()
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                    imported |= {node.module} | {f"{node.module}.{alias.name}" for alias in node.names}
                elif isinstance(node, ast.Import):
                    imported |= {alias.name for alias in node.names}
            modules[name] = imported
    edges = {
        name: {other for other in imported if other in modules and other != name} for name, imported in modules.items()
    }

    def reaches(start: str, goal: str) -> bool:
        seen, todo = set(), list(edges[start])
        while todo:
            current = todo.pop()
            if current == goal:
                return True
            if current not in seen:
                seen.add(current)
                todo.extend(edges[current])
        return False

    circles = sorted(f"{name} -> {other}" for name in edges for other in edges[name] if reaches(other, name))
    assert not circles, "imports that lead back to their module:\n" + "\n".join(circles)
