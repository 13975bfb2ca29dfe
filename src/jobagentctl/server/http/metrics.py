"""Prometheus metrics of one server app, on a registry of its own (never the global one).

Counters are bumped by the service and the reaper. Claim gauges are read from the database at scrape
time, so every replica reports the same shared claim table.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from jobagentctl.models import ClaimState
from jobagentctl.server.http.connections import COUNTS
from jobagentctl.server.store import Store

__all__ = ["CONTENT_TYPE", "Metrics"]

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

# Request latency buckets: the API answers in milliseconds; long-polls take up to 30 s.
_LATENCY_BUCKETS = (
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
)


class Metrics:
    """The metrics of one app, on its own registry; the service, the reaper and the edge bump
    them, ``/metrics`` renders them."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.claims = Counter(
            "jobagentctl_claims",
            "Jobs claimed, by endpoint and lease.",
            ["kind", "leased"],
            registry=r,
        )
        self.heartbeats = Counter("jobagentctl_heartbeats", "Accepted heartbeats.", registry=r)
        self.reaped = Counter(
            "jobagentctl_reaped",
            "Expired claims reaped, by outcome (requeued or failed by maxReclaims).",
            ["outcome"],
            registry=r,
        )
        self.lease_lost = Counter(
            "jobagentctl_lease_lost_rejections",
            "Heartbeats and status updates refused with 409 CLAIM_LOST or CLAIM_MISMATCH.",
            ["code"],
            registry=r,
        )
        self.reaper_errors = Counter(
            "jobagentctl_reaper_errors",
            "Reaper passes that failed (retried next tick).",
            registry=r,
        )
        self.long_polls = Gauge(
            "jobagentctl_long_polls_waiting", "Claim-next requests waiting for a job.", registry=r
        )
        self.active_claims = Gauge(
            "jobagentctl_active_claims", "Claims whose lease has not expired.", registry=r
        )
        self.expired_claims = Gauge(
            "jobagentctl_expired_claims", "Claims past their lease, not yet reaped.", registry=r
        )
        self.agents = Gauge(
            "jobagentctl_agents",
            "Job agents by presence state (busy, idle, offline), every workspace.",
            ["state"],
            registry=r,
        )
        self.revoked_claims = Gauge(
            "jobagentctl_revoked_claims",
            "Claims an operator ended that their agent has not let go of yet.",
            registry=r,
        )
        self.oldest_claim_age = Gauge(
            "jobagentctl_oldest_claim_age_seconds", "Age of the oldest claim row.", registry=r
        )
        self.scrape_errors = Counter(
            "jobagentctl_metrics_scrape_errors",
            "Scrapes that could not read claim statistics from the database.",
            registry=r,
        )
        self.request_latency = Histogram(
            "jobagentctl_http_request_duration_seconds",
            "HTTP request latency by method, route template and status.",
            ["method", "route", "status"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.log_bytes = Counter(
            "jobagentctl_log_bytes_appended",
            "Bytes of job output appended to attempt logs (before the cap cuts any).",
            registry=r,
        )
        self.log_chunks = Counter(
            "jobagentctl_log_chunks_appended", "Chunks appended to attempt logs.", registry=r
        )
        self.logs_expired = Counter(
            "jobagentctl_logs_expired", "Attempt logs deleted by log retention.", registry=r
        )

        # Read from the connection layer at scrape time (it sits below the app, per process).
        connections = Gauge(
            "jobagentctl_connections_accepted",
            "Connections accepted by this process since start (over TLS: once handshaken).",
            registry=r,
        )
        connections.set_function(lambda: COUNTS.connections)
        handshakes = Gauge(
            "jobagentctl_tls_handshakes",
            "TLS handshakes completed by this process since start, full or resumed.",
            ["resumed"],
            registry=r,
        )
        handshakes.labels("no").set_function(lambda: COUNTS.tls_full)
        handshakes.labels("yes").set_function(lambda: COUNTS.tls_resumed)

    async def render(self, store: Store, presence_window: float = 90.0) -> bytes:
        """The exposition text, with the claim and agent gauges refreshed from the database."""
        try:
            stats = await store.claim_stats()
            agents = await store.entities.agent_state_counts(presence_window)
        except Exception:
            # A scrape must still answer (counters stay useful) when the database is down.
            self.scrape_errors.inc()
        else:
            self.active_claims.set(stats.get(ClaimState.ACTIVE, 0.0))
            self.expired_claims.set(stats.get(ClaimState.EXPIRED, 0.0))
            self.oldest_claim_age.set(stats.get("oldest_age_seconds", 0.0))
            self.revoked_claims.set(stats.get(ClaimState.REVOKED, 0.0))
            for state, count in agents.items():
                self.agents.labels(state).set(count)
        data: bytes = generate_latest(self.registry)
        return data
