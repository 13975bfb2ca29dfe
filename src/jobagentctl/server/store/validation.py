"""What the store checks of its arguments before any SQL runs: lease lengths, workspace slugs
(and the slug a name gives) and claim-list states."""

from __future__ import annotations

import re

from jobagentctl.errors import ValidationError
from jobagentctl.models import SLUG_PATTERN, ClaimState

__all__ = ["check_claim_state", "check_lease", "check_slug", "slugify"]

_SLUG = re.compile(SLUG_PATTERN)
_NOT_SLUG_CHARS = re.compile(r"[^a-z0-9]+")
# What slugify appends to a slug shorter than ctrlplane's minimum ("qa" → "qa-ws").
_SHORT_SLUG_SUFFIX = "-ws"


def check_lease(lease_seconds: int | None) -> None:
    """The store takes any lease of at least a second (clamping is the service's job)."""
    if lease_seconds is not None and lease_seconds < 1:
        raise ValidationError("leaseSeconds must be at least 1")


def check_slug(slug: str) -> str:
    """``slug`` if it is one (ctrlplane's pattern); else a ValidationError (400, exit 2)."""
    if not _SLUG.fullmatch(slug):
        raise ValidationError(
            "a slug is 3-50 characters: lowercase letters, digits and '-' (as ctrlplane's)"
        )
    return slug


def slugify(name: str) -> str:
    """The slug derived from a workspace name, as migration 0002 derives it in SQL. Runs of other
    characters become one '-'. One shorter than 3 characters gets "-ws" appended."""
    slug = _NOT_SLUG_CHARS.sub("-", name.lower()).strip("-")[:50].strip("-") or "workspace"
    return slug if len(slug) >= 3 else slug + _SHORT_SLUG_SUFFIX


def check_claim_state(state: str) -> ClaimState:
    """The ``state`` filter of ``list_claims``; an unknown one is a ValidationError."""
    try:
        return ClaimState(state)
    except ValueError:
        names = ", ".join(sorted(ClaimState))
        raise ValidationError(f"state must be one of {names}") from None
