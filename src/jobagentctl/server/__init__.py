"""The server half: the pull-agent API with leases, on SQLite or PostgreSQL.

Never imported by the client commands; everything heavy is imported here lazily.
"""
