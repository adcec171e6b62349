"""The README and docs/ as a reader meets them: a front page of at most 300 lines, every link to a file or a
heading that exists, and every YAML example a config (or a piece of one) that the loader accepts."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from config import parse_config

REPO = Path(__file__).resolve().parent.parent
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
BASE: dict[str, Any] = {
    "destination": {"type": "filesystem", "root": "/data/mirror"},
    "mirrors": [{"name": "orders", "cluster": "prod", "topics": ["orders"]}],
    "clusters": {"prod": {"bootstrap-servers": "kafka:9092"}},
}


class AnyVariable(dict[str, str]):
    """An environment in which every variable an example names is set."""

    def get(self, key: str, default: Any = None) -> str:  # type: ignore[override]
        return "1"


def outside_fences(text: str) -> Iterator[str]:
    fence = False
    for line in text.splitlines():
        if line.startswith("```"):
            fence = not fence
        elif not fence:
            yield line


def anchors(page: Path) -> set[str]:
    """GitHub's anchors of a page's headings: lower case, punctuation but - and _ dropped, spaces to -."""
    found = set()
    for line in outside_fences(page.read_text(encoding="utf-8")):
        if heading := re.match(r"^#{1,6} (.*)$", line):
            found.add(re.sub(r"[^\w\- ]", "", heading.group(1).strip().lower()).replace(" ", "-"))
    return found


def test_the_readme_is_a_front_page() -> None:
    assert len((REPO / "README.md").read_text(encoding="utf-8").splitlines()) <= 300


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_link_reaches_a_file_and_a_heading(page: Path) -> None:
    for line in outside_fences(page.read_text(encoding="utf-8")):
        for target in LINK.findall(line):
            if re.match(r"^(https?|mailto):", target):
                continue
            path, _, heading = target.partition("#")
            file = (page.parent / path).resolve() if path else page
            assert file.exists(), f"{page.name}: {target} (no such file)"
            if heading and file.suffix == ".md":
                assert heading in anchors(file), f"{page.name}: {target} (no such heading)"


def examples() -> Iterator[tuple[str, str]]:
    for page in PAGES:
        for index, block in enumerate(re.findall(r"```ya?ml\n(.*?)```", page.read_text(encoding="utf-8"), re.S)):
            yield f"{page.name}[{index}]", block


@pytest.mark.parametrize(("where", "block"), list(examples()), ids=[w for w, _ in examples()])
def test_every_yaml_example_is_a_config_or_a_piece_of_one_the_loader_accepts(where: str, block: str) -> None:
    example = yaml.safe_load(block)
    assert isinstance(example, dict), where
    if "security" in example:  # a cluster's security block
        example = {"clusters": {"prod": {"bootstrap-servers": "kafka:9092", **example}}}
    config = {**BASE, **example}
    if "clusters" in example and "mirrors" not in example:
        config["mirrors"] = [{"name": "e", "cluster": next(iter(example["clusters"])), "topics": ["orders"]}]
    parse_config(yaml.safe_dump(config), env=AnyVariable())
