"""`table-sync --config C`: every mirror's chain of the archive joined to its table (destination.table), as the run
process would keep it, in one run (sinks.tables.sync). The mirrors are the config's as the source clusters hold
them now (as `plan` lists them; `--shard` takes one shard's). A progress line per commit on stderr; one summary
line per table on stdout."""

from __future__ import annotations

import sys

import anyio

from config import ConfigError
from config.estate import Shard, compile_entries
from config.model import Config
from core.errors import SourceError
from sinks.destinations import open_destination
from sinks.tables.sync import TableSync, sync_tables
from source.discovery import plan_estate
from source.offsets import SourceClusters


def _commits(count: int) -> str:
    return f"{count} commit{'' if count == 1 else 's'}"


def _progress(sync: TableSync, left: int) -> None:
    print(
        f"table-sync: {sync.table}: {sync.added} blobs added in {_commits(sync.commits)}, {left} to go",
        file=sys.stderr,
        flush=True,
    )


def complete(sync: TableSync) -> bool:
    """Every chain of the table reached its end (none stopped at a gap or has an unknown position)."""
    return not sync.gaps and not sync.unknown


def summary(sync: TableSync) -> str:
    """One table's outcome, as the command prints it."""
    in_step = sync.chains - len(sync.gaps) - len(sync.unknown)
    chains = f"{in_step} chains" if in_step == sync.chains else f"{in_step} of {sync.chains} chains"
    if sync.added:
        line = f"{sync.table}: {sync.added} blobs added in {_commits(sync.commits)}; {chains} in step"
    else:
        line = f"{sync.table}: nothing to add; {chains} in step"
    notes = [f"{chain}: position unknown (its table history was expired), nothing added" for chain in sync.unknown]
    notes += [f"{chain}: stopped before {blob}, which does not continue the chain" for chain, blob in sync.gaps.items()]
    return "\n".join([line, *(f"  {note}" for note in notes)])


async def table_sync(config: Config, shard: Shard | None, timeout_s: float) -> list[TableSync]:
    """Raises ConfigError without a table, SourceError when a cluster cannot be read, TableError when a table
    cannot be read or committed."""
    destination = open_destination(config.destination)
    archive, settings = destination.archive, destination.services.table
    if archive is None or settings is None:
        raise ConfigError("destination.table", "is not configured: there is no table to sync")
    destination.resolve()
    await archive.check_format()
    clusters = SourceClusters()
    try:
        with anyio.fail_after(timeout_s):
            plan = await plan_estate(clusters, compile_entries(config), shard)
    except TimeoutError:
        raise SourceError(f"reading the source clusters' topics timed out after {timeout_s:g}s") from None
    finally:
        with anyio.CancelScope(shield=True):
            await clusters.close()
    return await sync_tables(archive, settings, destination.services.daily, plan.mirrors, _progress)
