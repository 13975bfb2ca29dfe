"""The gateway's metrics of its requests to ctrlplane, on the app's own registry."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

__all__ = ["UpstreamMetrics"]


class UpstreamMetrics:
    """Upstream request counts (by operation and outcome ``ok|refused|error``), latency, whether
    ctrlplane answers, and the outbox's pending operations."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        r = registry or CollectorRegistry(auto_describe=True)
        self.requests = Counter(
            "jobagentctl_upstream_requests",
            "Requests the gateway sent to ctrlplane, by operation and outcome.",
            ["operation", "outcome"],
            registry=r,
        )
        self.latency = Histogram(
            "jobagentctl_upstream_request_seconds",
            "Latency of the gateway's requests to ctrlplane.",
            ["operation"],
            registry=r,
        )
        self.up = Gauge(
            "jobagentctl_upstream_up", "1 while ctrlplane answers the gateway, else 0.", registry=r
        )
        self.pending = Gauge(
            "jobagentctl_upstream_pending_operations",
            "Outbox operations (reports, requeues) not yet delivered to ctrlplane.",
            registry=r,
        )

    def observe(self, operation: str, outcome: str, seconds: float) -> None:
        self.requests.labels(operation, outcome).inc()
        self.latency.labels(operation).observe(seconds)
        # Any answer (even a refusal) means ctrlplane is there.
        self.up.set(0 if outcome == "error" else 1)
