"""Every file generated from the code is committed as the code renders it now."""

from __future__ import annotations

import pytest

from tools.generated import COMMAND, GENERATED, REPO, Generated


@pytest.mark.parametrize("generated", GENERATED, ids=[g.path.name for g in GENERATED])
def test_the_committed_file_is_current(generated: Generated) -> None:
    assert generated.path.read_text(encoding="utf-8") == generated.render(), (
        f"{generated.path.relative_to(REPO)} is stale: run `{COMMAND}` and commit the result"
    )
