"""Every third-party package the code imports is declared in pyproject.toml: the product's packages import only
`[project].dependencies` (what `pip install mirror-v3` brings), the test kit, tests, e2e tests, bench and tools may
also import the `dev` extra. A package that arrives only as another one's dependency can disappear with that
package's next release."""

from __future__ import annotations

import ast
import importlib.metadata
import re
import sys
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PRODUCT = ("core", "config", "kafka_clients", "telemetry", "source", "sinks", "workers", "supervisor", "commands")
TESTING = ("testkit", "tests", "e2e", "bench", "tools")
FIRST_PARTY = set(PRODUCT + TESTING)


def _name(requirement: str) -> str:
    return re.split(r"[\s\[=<>!~;]", requirement, maxsplit=1)[0].lower().replace("_", "-")


def _declared() -> tuple[set[str], set[str]]:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    return {_name(r) for r in project["dependencies"]}, {_name(r) for r in project["optional-dependencies"]["dev"]}


def _imports(packages: tuple[str, ...]) -> dict[str, set[str]]:
    """Top-level third-party module -> the files importing it."""
    found: dict[str, set[str]] = {}
    for package in packages:
        for file in (REPO / package).rglob("*.py"):
            for node in ast.walk(ast.parse(file.read_text(), str(file))):
                if isinstance(node, ast.Import):
                    names = [alias.name for alias in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names = [node.module]
                else:
                    continue
                for name in names:
                    top = name.split(".")[0]
                    if top not in sys.stdlib_module_names and top not in FIRST_PARTY:
                        found.setdefault(top, set()).add(str(file.relative_to(REPO)))
    return found


def _undeclared(packages: tuple[str, ...], allowed: set[str]) -> dict[str, list[str]]:
    distributions = importlib.metadata.packages_distributions()
    missing: dict[str, list[str]] = {}
    for module, files in sorted(_imports(packages).items()):
        names = {d.lower().replace("_", "-") for d in distributions.get(module, [module])}
        if not names & allowed:
            missing[f"{module} ({', '.join(sorted(names))})"] = sorted(files)[:3]
    return missing


def test_the_products_imports_are_its_declared_dependencies() -> None:
    runtime, _ = _declared()
    assert _undeclared(PRODUCT, runtime) == {}


def test_the_test_kits_and_tools_imports_are_declared_dependencies_or_dev_extras() -> None:
    runtime, dev = _declared()
    assert _undeclared(TESTING, runtime | dev) == {}
