"""Unit tests of the run supervisor (fake API client, real child processes)."""
