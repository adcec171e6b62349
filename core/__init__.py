"""The bottom layer: the record model, the error family and exit codes, the logging helper and secret redaction."""
