"""What `create-topics` does to one destination topic, decided from what the source and destination topics are.

- A missing destination topic is created with the source's partition count and the allow-listed configs the
  source topic sets itself (broker defaults stay the destination broker's).
- A destination with fewer partitions than its source gets the rest added when it was in step with the source
  before (the source grew while this process watched), or when `add-partitions` says so; otherwise the
  difference is reported and those partitions are not mirrored. More partitions than the source is fine.
- Allow-listed configs follow the source: a value the source sets is set, an override the source dropped is
  dropped. `cleanup.policy` is the exception: a different policy on an existing destination is reported, never
  changed, since it decides whether the destination deletes records.

Frozen data in and out; no I/O, no clock.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kafka_clients.admin import CLEANUP_POLICY, TopicState


@dataclass(frozen=True)
class TopicActions:
    create: TopicState | None = None  # the topic to create
    partitions_to: int | None = None  # add partitions up to this count
    set_configs: dict[str, str] = field(default_factory=dict)
    delete_configs: tuple[str, ...] = ()
    problems: tuple[str, ...] = ()  # reported, not acted on

    @property
    def changes(self) -> bool:
        return bool(self.create or self.partitions_to or self.set_configs or self.delete_configs)


def plan_topic(
    topic: str,
    source: TopicState,
    destination: TopicState | None,
    allowed: tuple[str, ...],
    *,
    in_step_at: int | None,
    add_partitions: bool,
    sync_configs: bool,
) -> TopicActions:
    """`in_step_at`: the destination's partition count when it last matched the source's, in this process."""
    copied = {name: value for name, value in source.configs.items() if name in allowed}
    if destination is None:
        return TopicActions(create=TopicState(source.partitions, copied, source.cleanup_policy))
    problems = []
    partitions_to = None
    if destination.partitions < source.partitions:
        if add_partitions or in_step_at == destination.partitions:
            partitions_to = source.partitions
        else:
            first, last = destination.partitions, source.partitions - 1
            missing = f"partition {first}" if first == last else f"partitions {first}-{last}"
            problems.append(
                f"destination topic {topic!r} has {destination.partitions} partitions, its source "
                f"{source.partitions}: {missing} cannot be mirrored (set add-partitions: true, or add them)"
            )
    set_configs: dict[str, str] = {}
    delete_configs: list[str] = []
    if CLEANUP_POLICY in allowed and destination.cleanup_policy != source.cleanup_policy:
        problems.append(
            f"destination topic {topic!r} has cleanup.policy {destination.cleanup_policy}, its source "
            f"{source.cleanup_policy}: not changed"
        )
    if sync_configs:
        for name in allowed:
            if name == CLEANUP_POLICY:
                continue
            wanted, found = copied.get(name), destination.configs.get(name)
            if wanted is not None and wanted != found:
                set_configs[name] = wanted
            elif wanted is None and found is not None:
                delete_configs.append(name)
    return TopicActions(None, partitions_to, set_configs, tuple(delete_configs), tuple(problems))
