"""The job's processes: the child, the watchdog that owns its tree, its files, and the socket
that hands `run` values to redact."""
