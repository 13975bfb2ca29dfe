"""Unit tests of the run supervisor: its decisions with a scripted client, no child process."""
