"""The destination layer. `destinations.open_destination` picks the configured kind once; everything above calls
through the `destination.Destination` it returns. One package per kind (`filesystem`, `s3`, `kafka`), beside what
kinds share: `blob` (the chain of Parquet blobs, its sink, writer and staging), `archive` (the documents a blob
archive keeps beside its chains), `schemas` (schema IDs mapped, rewritten and archived); and at this level the
Sink protocol (`base`), the write targets of the Spark tasks (`write_target`), retries, leases and health."""
