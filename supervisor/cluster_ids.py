"""The cluster ids a renumber mirror stamps on its records and checks for loops, read with the admin clients."""

from __future__ import annotations

from config.model import KafkaDestination, SourceConfig
from kafka_clients.admin import AdminRequestError, ClusterAdmin
from kafka_clients.diagnosis import diagnose_bootstrap
from kafka_clients.settings import cluster_access
from sinks.base import DestinationError
from sinks.retry import TransientDestinationError, retry_policy, retry_transient

_PROBE_MS = 3_000


async def loop_ids(
    destination: KafkaDestination, sources: dict[str, tuple[SourceConfig, str]]
) -> dict[str, tuple[str, str]]:
    """renumber: per source cluster name, (its cluster id, the destination's): what the tasks stamp on each
    record and what they leave out. `sources`: cluster name → (its settings, the field they are written in).
    An unreachable cluster is retried under the destination's retry policy, as opening the destination is; a
    credential or certificate problem is not, and is named."""
    timeout_ms = destination.request_timeout_ms
    policy = retry_policy(destination.retry)

    async def cluster_id(cluster: SourceConfig | KafkaDestination, field: str) -> str:
        bootstrap, access = cluster.bootstrap_servers, cluster_access(cluster, field)
        admin = ClusterAdmin(bootstrap, access.librdkafka(), timeout_ms / 1000)

        async def attempt() -> str:
            try:
                return await admin.cluster_id()
            except AdminRequestError:  # librdkafka says "transport failure" for a wrong password, too
                diagnosis = await diagnose_bootstrap(bootstrap, access.aiokafka(), timeout_ms)
                message = f"{bootstrap}: unreachable: {diagnosis.reason}"
                if diagnosis.permanent:
                    raise DestinationError(message) from None
                raise TransientDestinationError(message) from None

        # Fail fast: librdkafka asks a cluster that refuses the credentials again until its timeout (30 s by
        # default) before it says so; one connection of aiokafka's names a refusal at once. A short probe: an
        # address that does not answer is the retried path's to wait for.
        quick = await diagnose_bootstrap(bootstrap, access.aiokafka(), min(timeout_ms, _PROBE_MS))
        if quick.permanent:
            raise DestinationError(f"{bootstrap}: unreachable: {quick.reason}")
        return await retry_transient(attempt, policy, f"read the cluster id of {bootstrap}")

    destination_id = await cluster_id(destination, "destination")
    found = {}
    for name, (source, field) in sorted(sources.items()):
        found[name] = (await cluster_id(source, field), destination_id)
    return found
