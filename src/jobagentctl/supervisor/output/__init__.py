"""The command's output: relayed to our stdout/stderr, kept as a tail, shipped to the job's log,
and redacted before it leaves the machine."""
