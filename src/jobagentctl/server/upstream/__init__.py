"""Gateway mode: our server in front of ctrlplane's API (docs/gateway.md).

ctrlplane stays the record of every job's status; our store holds the claims, leases,
attempts, logs, presence and the agents' keys.

- ``client`` speaks ctrlplane's V1 API.
- ``service`` is the lease service's gateway variant.
- ``worker`` is the background loop: outbox delivery, the gateway's reaper, the sync with
  changes made in ctrlplane.
"""
