"""The bottom layer, what every layer shares: the record model, the error family and exit codes, any exception as
one operator-readable line (`describe.py`), the one retry mechanism, a remote service's reachability, the clock, the
logging helper, secret redaction, installed versions (`version.py`) and the signals that arrive before a process
handles them itself (`early_signals.py`)."""
