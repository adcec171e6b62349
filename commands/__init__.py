"""The CLI and its one-shot commands (restore, verify, status, plan, schema migration, JVM preparation): each reads
what it needs, says what it found, and exits. `supervisor/` keeps the long-running process that `run` starts."""
