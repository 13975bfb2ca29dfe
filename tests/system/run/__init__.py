"""End-to-end tests of `jobagentctl run`: real child processes against a real server."""
