"""Root conftest: the shared fixture plugins.

- ``tests.fixtures.databases``: ``database_url`` over SQLite and PostgreSQL (each test gets its
  own database; PostgreSQL ones are cloned from a migrated template and dropped afterwards).
- ``tests.fixtures.live_server``: a real ``jobagentctl server start`` process on a free port.
"""

pytest_plugins = ["tests.fixtures.databases", "tests.fixtures.live_server"]
