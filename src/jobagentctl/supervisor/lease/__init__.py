"""The lease of one claimed job and the threads that keep it: the heartbeat, the cancel poll,
and their shared skeleton."""
