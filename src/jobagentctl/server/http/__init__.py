"""The server's HTTP edge: runner, connections, TLS, the app, routing, operations, encoding,
failures, OpenAPI, auth and metrics. The domain (service, scopes, presence, reaper, logs) is in
the package above."""
