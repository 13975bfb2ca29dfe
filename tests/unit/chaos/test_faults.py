"""The fault schedule: a seed names one schedule, every fault kind shows up, and faults on one
target never overlap (a restarted server is up before it is hit again)."""

from __future__ import annotations

import itertools

import pytest
from tools.chaos.faults import AGENT_KINDS, INFRA_KINDS, KINDS, Fault, draw_schedule

LEASE = 2.0


def schedule(seed: int, *, postgres: bool = True, duration: float = 15.0) -> list[Fault]:
    return draw_schedule(
        seed, duration=duration, agents=4, servers=2, lease=LEASE, postgres=postgres
    )


def test_a_seed_names_one_schedule() -> None:
    assert schedule(5) == schedule(5)
    assert schedule(5) != schedule(6)


@pytest.mark.parametrize("seed", range(1, 21))
def test_every_kind_appears_and_targets_never_overlap(seed: int) -> None:
    faults = schedule(seed)
    assert {f.kind for f in faults} == set(KINDS)
    assert all(0 < f.at < 15.0 for f in faults)
    assert faults == sorted(faults, key=lambda f: f.at)
    lanes: dict[str, list[Fault]] = {}
    for f in faults:
        lane = f"agent{f.target}" if f.kind in AGENT_KINDS else f.kind
        if f.kind.startswith("proxy_"):
            lane = "proxy"
        lanes.setdefault(lane, []).append(f)
    for lane, items in lanes.items():
        for a, b in itertools.pairwise(items):
            assert b.at >= a.at + a.duration, (lane, a.describe(), b.describe())
    infra = [f for f in faults if f.kind in INFRA_KINDS]
    for a, b in itertools.pairwise(infra):
        assert b.at >= a.at + a.duration + 2.0, (a.describe(), b.describe())


@pytest.mark.parametrize("seed", range(1, 6))
def test_shapes_of_each_kind(seed: int) -> None:
    for f in schedule(seed, duration=60.0):
        if f.kind == "agent_stop":
            assert f.duration > LEASE, "a zombie must sleep past its lease"
        if f.kind == "proxy_delay_long":
            assert f.delay[0] > LEASE
        if f.kind == "proxy_delay_short":
            assert f.delay[1] < LEASE
        if f.kind.startswith("proxy_"):
            assert 0 < f.probability <= 1 and f.target in (None, 0, 1, 2, 3)
        if f.kind == "server_restart":
            assert f.detail in ("SIGTERM", "SIGKILL") and f.target in (0, 1)
        if f.kind == "db_restart":
            assert f.detail in ("fast", "immediate")


def test_sqlite_runs_get_no_database_restarts() -> None:
    for seed in range(1, 11):
        assert "db_restart" not in {f.kind for f in schedule(seed, postgres=False)}
