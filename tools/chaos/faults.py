"""The fault schedule of one chaos run, drawn from a seed: what to break, when, for how long.

The schedule is data (printed with every run), so a seed names the same faults at the same
offsets each time; the interleaving with the agents' own timing still varies from run to run.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, replace

__all__ = [
    "AGENT_KINDS",
    "INFRA_KINDS",
    "KINDS",
    "OPERATOR_KINDS",
    "PROXY_KINDS",
    "Fault",
    "draw_schedule",
]

AGENT_KINDS = ("agent_kill", "agent_stop", "agent_interrupt")
INFRA_KINDS = ("server_restart", "db_restart")
PROXY_KINDS = ("proxy_drop", "proxy_reset", "proxy_delay_short", "proxy_delay_long")
OPERATOR_KINDS = ("operator_requeue",)
KINDS = AGENT_KINDS + INFRA_KINDS + PROXY_KINDS + OPERATOR_KINDS
# The faults that hit one process: kind → (duration bounds in s, scaled by the lease?, the
# processes a target is drawn from, the details drawn from).
_PROCESS_FAULTS: dict[str, tuple[float, float, bool, str, tuple[str, ...]]] = {
    "agent_kill": (0.2, 2.0, False, "agents", ("agent", "agent+job")),
    "agent_stop": (1.5, 3.0, True, "agents", ("agent", "agent+job")),
    "agent_interrupt": (0.2, 1.0, False, "agents", ("SIGINT",)),
    "server_restart": (0.2, 1.5, False, "servers", ("SIGTERM", "SIGKILL")),
}

# Between two server/database faults the system gets this long to make progress, so a run
# tests recovery rather than a permanently broken service.
_INFRA_GAP = (2.0, 4.0)
# How long a server takes to come back after its downtime (interpreter start, migrations).
_SERVER_START = 3.0
# Mean gap between fault starts, in seconds (all lanes together).
_START_GAP = (0.4, 1.6)


@dataclass(frozen=True)
class Fault:
    """One injected fault. ``at`` is seconds after the fault phase began.

    - ``agent_kill``: SIGKILL agent ``target``; ``detail`` ``agent`` (its job keeps running,
      orphaned) or ``agent+job`` (the job's process group too, like a host crash); restarted
      ``duration`` s later.
    - ``agent_stop``: SIGSTOP (``agent`` or ``agent+job``) for ``duration`` s — past the lease —
      then SIGCONT: a zombie that wakes up holding a claim that may be gone.
    - ``agent_interrupt``: SIGINT agent ``target`` (Ctrl-C): it stops its job, releases it to
      the queue with its claim id and exits 130; restarted ``duration`` s later.
    - ``server_restart``: SIGTERM (drain) or SIGKILL (``detail``) server ``target``, start it
      again on the same port ``duration`` s after it stopped.
    - ``db_restart``: ``pg_ctl restart -m fast|immediate`` (``detail``) of the private cluster.
    - ``operator_requeue``: an operator puts a running job back in the queue (status
      ``queued`` without a claim id): its claim goes, its agent's next heartbeat is refused.
    - ``proxy_*``: a window of ``duration`` s where each request of the targeted agents (all
      when ``target`` is None) is hit with probability ``probability``; delays are drawn from
      ``delay`` (short: well inside a lease; long: longer than a lease).
    """

    at: float
    kind: str
    duration: float
    target: int | None = None
    detail: str = ""
    probability: float = 0.0
    delay: tuple[float, float] = (0.0, 0.0)

    def describe(self) -> str:
        where = "" if self.target is None else f" #{self.target}"
        extra = f" {self.detail}" if self.detail else ""
        if self.kind.startswith("proxy_"):
            extra += f" p={self.probability:.2f}"
            if self.delay != (0.0, 0.0):
                extra += f" delay={self.delay[0]:.1f}-{self.delay[1]:.1f}s"
        return f"t+{self.at:5.1f}s {self.kind}{where}{extra} for {self.duration:.1f}s"


def draw_schedule(
    seed: int,
    *,
    duration: float,
    agents: int,
    servers: int,
    lease: float,
    postgres: bool,
    only: tuple[str, ...] | None = None,
) -> list[Fault]:
    """Faults over ``duration`` seconds. Every kind that applies (of ``only``, when given)
    appears at least once when the phase is long enough; the rest are drawn at random. Faults
    on one target never overlap, nor do two server/database faults, nor two proxy windows."""
    kinds = [k for k in (only or KINDS) if postgres or k != "db_restart"]
    faults: list[Fault] = []
    # A short phase may not fit every kind in one draw: draw again (still a function of the
    # seed alone) until it does, or give up after a few tries and keep the last.
    for retry in range(20):
        rng = random.Random(seed if retry == 0 else f"{seed}/{retry}")
        faults = _draw_once(rng, kinds, duration, agents=agents, servers=servers, lease=lease)
        if {f.kind for f in faults} == set(kinds):
            break
    return faults


def _draw_once(
    rng: random.Random,
    kinds: list[str],
    duration: float,
    *,
    agents: int,
    servers: int,
    lease: float,
) -> list[Fault]:
    order = kinds[:]
    rng.shuffle(order)
    # Roughly one fault per second of the phase, the mandatory ones first.
    extra = max(0, round(duration / 1.0) - len(order))
    order += [rng.choice(kinds) for _ in range(extra)]

    lane_free: dict[str, float] = {}
    faults: list[Fault] = []
    t = rng.uniform(0.5, 1.5)
    for kind in order:
        fault = _draw(rng, kind, t, agents=agents, servers=servers, lease=lease, phase=duration)
        lane = _lane(fault)
        start = max(t, lane_free.get(lane, 0.0))
        if kind in INFRA_KINDS:
            start = max(start, lane_free.get("infra", 0.0))
        if start + min(fault.duration, 1.0) > duration:
            continue
        fault = _draw(
            rng,
            kind,
            start,
            agents=agents,
            servers=servers,
            lease=lease,
            phase=duration,
            like=fault,
        )
        faults.append(fault)
        # A target's next fault waits until this one is over (a restarted agent is up; a
        # restarted server has had time to import and listen again).
        busy = fault.duration + (_SERVER_START if kind == "server_restart" else 0.5)
        lane_free[lane] = start + busy
        if kind in INFRA_KINDS:
            lane_free["infra"] = start + busy + rng.uniform(*_INFRA_GAP)
        t += rng.uniform(*_START_GAP)
    faults.sort(key=lambda f: f.at)
    return faults


def _lane(fault: Fault) -> str:
    if fault.kind in AGENT_KINDS:
        return f"agent{fault.target}"
    if fault.kind in INFRA_KINDS:
        return f"{fault.kind}{fault.target}"
    if fault.kind in OPERATOR_KINDS:
        return "operator"
    return "proxy"


def _draw(
    rng: random.Random,
    kind: str,
    at: float,
    *,
    agents: int,
    servers: int,
    lease: float,
    phase: float,
    like: Fault | None = None,
) -> Fault:
    """A fault of ``kind`` at ``at``; with ``like``, the same fault moved to ``at``."""
    if like is not None:
        return replace(like, at=round(at, 2))
    if kind in _PROCESS_FAULTS:
        low, high, scaled, pool, details = _PROCESS_FAULTS[kind]
        duration = round((lease if scaled else 1.0) * rng.uniform(low, high), 2)
        target = rng.randrange(agents if pool == "agents" else servers)
        # A single detail is not drawn: the seeded schedules stay as they were.
        detail = details[0] if len(details) == 1 else rng.choice(details)
        return Fault(at, kind, duration=duration, target=target, detail=detail)
    if kind == "operator_requeue":
        return Fault(at, kind, duration=0.5)
    if kind == "db_restart":
        return Fault(at, kind, duration=0.0, detail=rng.choice(("fast", "immediate")))
    # Short phases get shorter windows, so that every kind still fits in.
    window = round(rng.uniform(1.5, 4.0) * min(1.0, phase / 30.0), 2)
    subset = None
    if agents > 1 and rng.random() < 0.5:
        # Half the windows hit only some agents: a partial partition.
        subset = rng.randrange(agents)
    probability = round(rng.uniform(0.4, 0.9), 2)
    if kind == "proxy_delay_short":
        delay = (round(0.1 * lease, 2), round(0.6 * lease, 2))
        return Fault(at, kind, window, subset, probability=probability, delay=delay)
    if kind == "proxy_delay_long":
        delay = (round(1.2 * lease, 2), round(2.5 * lease, 2))
        return Fault(at, kind, window, subset, probability=probability, delay=delay)
    if kind in ("proxy_drop", "proxy_reset"):
        return Fault(at, kind, window, subset, probability=probability)
    raise ValueError(f"unknown fault kind {kind!r}")
