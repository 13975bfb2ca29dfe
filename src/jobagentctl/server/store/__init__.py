"""Storage: the ``Store`` protocol and its SQLite and PostgreSQL implementations."""
