"""The run supervisor with a scripted client and real child processes (no server)."""
