"""Client settings: flags, environment, ctrlplane's variables and the config file, merged once.

Every config key the client reads is named here and nowhere else. Every environment variable is
named here too, or in ``models.py`` where `run`'s child environment names it as well.
"""

from __future__ import annotations

import json
import os
import re
import stat
import sys
import tempfile
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit
from uuid import UUID

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator
from pydantic import ValidationError as PydanticValidationError

from jobagentctl.errors import ConfigError, UsageError
from jobagentctl.models import (
    AGENT_ENV,
    API_KEY_ENV,
    API_KEY_FILE_ENV,
    ATTEMPT_ENV,
    CLAIM_ID_ENV,
    CTRLPLANE_ENV,
    ENV_PREFIX,
    JOB_ID_ENV,
    LEASE_SECONDS_ENV,
    SLUG_PATTERN,
    URL_ENV,
    WORKSPACE_ENV,
    Workspace,
)

_SLUG = re.compile(SLUG_PATTERN)

__all__ = [
    "ATTEMPT_ENV",
    "CA_BUNDLE_ENV",
    "CLAIM_ID_ENV",
    "CONFIG_ENV",
    "CTRLPLANE_ENV",
    "ENV_PREFIX",
    "JOB_ID_ENV",
    "LEASE_SECONDS_ENV",
    "PROFILE_KEYS",
    "ClientSettings",
    "JobContext",
    "config_path",
    "ensure_profile_free",
    "job_context",
    "normalize_url",
    "parse_uuid",
    "profile_hint",
    "validation_problems",
    "write_profile",
]

# Where the config file lives when JOBAGENTCTL_CONFIG does not say.
CONFIG_ENV = f"{ENV_PREFIX}CONFIG"
# Keys a `[profiles.NAME]` table may hold.
PROFILE_KEYS = frozenset(
    {
        "url",
        "workspace",
        "agent",
        "api_key",
        "api_key_file",
        "lease_seconds",
        "timeout",
        "ca_bundle",
    }
)
# The CA certificates (PEM file, or a directory of them) trusted for an https:// server.
CA_BUNDLE_ENV = f"{ENV_PREFIX}CA_BUNDLE"


def _warn(message: str) -> None:
    # Settings are only built by the CLI, whose conversation channel is stderr.
    print(f"warning: {message}", file=sys.stderr)


def config_path() -> Path:
    """The config file: ``$JOBAGENTCTL_CONFIG`` or ``$XDG_CONFIG_HOME/jobagentctl/config.toml``."""
    explicit = os.environ.get(CONFIG_ENV)
    if explicit:
        return Path(explicit).expanduser()
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "jobagentctl" / "config.toml"


def normalize_url(value: str) -> str:
    """The server's base URL without a trailing ``/`` or ``/api`` (the client appends ``/api``)."""
    url = value.strip().rstrip("/")
    if url.endswith("/api"):
        url = url[: -len("/api")]
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ValueError(f"not an http(s) URL: {value!r}")
    return url


def _read_key_file(path: Path, origin: str) -> str:
    try:
        key = path.expanduser().read_text(encoding="utf-8").strip()
    except OSError as exc:
        raise ConfigError(
            f"cannot read the API key file {path} ({origin}): {exc.strerror}"
        ) from exc
    if not key:
        raise ConfigError(f"the API key file {path} ({origin}) is empty")
    return key


def _resolve_key_file(
    values: dict[str, Any], origin: str, base: Path | None = None, *, both: str | None = None
) -> None:
    """Replace ``api_key_file`` by the key it holds; both at one level is ambiguous (``both``
    says so, naming the two settings)."""
    key_file = values.pop("api_key_file", None)
    if key_file in (None, ""):
        return
    if values.get("api_key") not in (None, ""):
        raise ConfigError(both or f"{origin} sets both an API key and an API key file: keep one")
    path = Path(str(key_file)).expanduser()
    if base is not None and not path.is_absolute():
        path = base / path
    values["api_key"] = _read_key_file(path, origin)


def _flag_values(flags: dict[str, Any]) -> dict[str, Any]:
    """Command-line flags; ``None`` means "flag not given"."""
    values = {k: v for k, v in flags.items() if v is not None}
    _resolve_key_file(values, "--api-key-file")
    return values


# Field → the JOBAGENTCTL_<FIELD> variable it is read from; api_key_file is resolved into
# api_key at that level.
_ENV_FIELDS = {
    "url": URL_ENV,
    "api_key": API_KEY_ENV,
    "api_key_file": API_KEY_FILE_ENV,
    "workspace": WORKSPACE_ENV,
    "agent": AGENT_ENV,
    "lease_seconds": LEASE_SECONDS_ENV,
    "timeout": f"{ENV_PREFIX}TIMEOUT",
    "profile": f"{ENV_PREFIX}PROFILE",
    "ca_bundle": CA_BUNDLE_ENV,
}


def _env_values() -> dict[str, Any]:
    """``JOBAGENTCTL_*`` variables; empty ones count as unset."""
    values = {name: value for name, env in _ENV_FIELDS.items() if (value := os.environ.get(env))}
    _resolve_key_file(
        values,
        API_KEY_FILE_ENV,
        both=f"{API_KEY_ENV} and {API_KEY_FILE_ENV} are both set: unset one of them",
    )
    return values


def _ctrlplane_values() -> dict[str, Any]:
    """ctrlplane's ``CTRLPLANE_URL`` / ``CTRLPLANE_API_KEY`` / ``CTRLPLANE_WORKSPACE``."""
    return {k: v for k, env in CTRLPLANE_ENV.items() if (v := os.environ.get(env))}


def _profile_values(profile: str | None) -> dict[str, Any]:
    """The chosen ``[profiles.NAME]`` table of the TOML config file."""
    path = config_path()
    if os.environ.get(CONFIG_ENV) and not path.is_file():
        # Named on purpose: reading nothing would only surface later as "no server URL".
        what = "is a directory" if path.is_dir() else "names no file"
        raise ConfigError(
            f"{CONFIG_ENV}={path} {what}: point it at the config file "
            "(e.g. .../jobagentctl/config.toml; jobagentctl server init --write-config creates "
            f"one) or unset {CONFIG_ENV}"
        )
    if not path.is_file():
        if profile is not None:
            raise ConfigError(f"profile {profile!r} asked for, but {path} does not exist")
        return {}
    data = _load_toml(path)
    name = profile
    if name is None:
        default = data.get("default_profile")
        if default is None:
            return {}
        if not isinstance(default, str):
            raise ConfigError(f"{path}: default_profile must be a string")
        name = default
    profiles = data.get("profiles", {})
    table = profiles.get(name) if isinstance(profiles, dict) else None
    if not isinstance(table, dict):
        known = ", ".join(sorted(profiles)) if isinstance(profiles, dict) else ""
        raise ConfigError(
            f"profile {name!r} is not in {path}" + (f" (profiles: {known})" if known else "")
        )
    unknown = sorted(set(table) - PROFILE_KEYS)
    if unknown:
        _warn(f"{path} [profiles.{name}]: unknown keys ignored: {', '.join(unknown)}")
    values = {k: v for k, v in table.items() if k in PROFILE_KEYS}
    _resolve_key_file(
        values,
        f"{path} [profiles.{name}]",
        base=path.parent,
        both=f"{path} [profiles.{name}] sets both api_key and api_key_file: keep one",
    )
    if isinstance(values.get("ca_bundle"), str) and values["ca_bundle"]:
        # Relative to the config file, as api_key_file is.
        values["ca_bundle"] = path.parent / Path(values["ca_bundle"]).expanduser()
    values["profile"] = name
    return values


def _load_toml(path: Path) -> dict[str, Any]:
    try:
        mode = path.stat().st_mode
        raw = path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror}") from exc
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        # The file may hold an API key: say so as ssh does, but keep going.
        _warn(
            f"{path} is accessible by group/others (mode {stat.S_IMODE(mode):04o}); "
            f"run: chmod 600 {path}"
        )
    try:
        return tomllib.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"{path} is not valid TOML: {exc}") from exc


class ClientSettings(BaseModel):
    """What the client needs to reach a server, merged from every source.

    Highest precedence first: flags, ``JOBAGENTCTL_*``, ``CTRLPLANE_*``, the profile in the config
    file, defaults. As clig.dev asks, what is typed now beats what was set up once. The ctrlplane
    variables come below ours, so an existing ctrlplane set-up works unchanged and ours can override
    it. Empty variables count as unset. Build it with :meth:`load`, which turns any problem into a
    :class:`~jobagentctl.errors.ConfigError` (exit 2).

    A plain pydantic model with its four sources written out, not pydantic-settings'
    ``BaseSettings``. Importing pydantic-settings loads every provider it ships (cloud secrets, CLI,
    dotenv, asyncio). That is ~75 ms of each CLI start, which none of these sources needs.
    """

    model_config = ConfigDict(extra="ignore", frozen=True)

    url: str | None = None
    api_key: SecretStr | None = None
    # A UUID, or a slug that the client resolves with GET /v1/workspaces/slug/{slug} (as ctrlc).
    workspace: UUID | str | None = None
    # A UUID, or an agent's name that the CLI looks up (it must be unique in the workspace).
    agent: UUID | str | None = None
    lease_seconds: int = Field(default=60, ge=0)
    timeout: float = Field(default=10.0, gt=0)
    profile: str | None = None
    # CA certificates to trust for https://, above SSL_CERT_FILE / SSL_CERT_DIR and certifi's.
    ca_bundle: Path | None = None

    @field_validator("url", mode="before")
    @classmethod
    def _normalize_url(cls, value: Any) -> Any:
        if value is None or value == "":
            return None
        return normalize_url(str(value))

    @field_validator("workspace", mode="before")
    @classmethod
    def _workspace(cls, value: Any) -> Any:
        # Only slugs the server can make are accepted, so a typo fails here (exit 2), not as
        # a "no such workspace" from the server.
        if not isinstance(value, str):
            return value
        reference = Workspace.reference(value)
        if isinstance(reference, str) and not _SLUG.fullmatch(reference):
            raise ValueError(
                "a workspace is a UUID or a slug (3-50 lowercase letters, digits and '-')"
            )
        return reference

    @field_validator("agent", mode="before")
    @classmethod
    def _agent(cls, value: Any) -> Any:
        if not isinstance(value, str):
            return value
        text = value.strip()
        try:
            return UUID(text)
        except ValueError:
            return text or None

    @field_validator("ca_bundle", mode="before")
    @classmethod
    def _ca_bundle(cls, value: Any) -> Any:
        if value is None or str(value).strip() == "":
            return None
        return Path(str(value)).expanduser()

    @field_validator("api_key", mode="before")
    @classmethod
    def _strip_key(cls, value: Any) -> Any:
        if isinstance(value, str):
            return value.strip() or None
        return value

    @classmethod
    def load(
        cls,
        *,
        url: str | None = None,
        workspace: str | UUID | None = None,
        agent: str | UUID | None = None,
        profile: str | None = None,
        api_key_file: str | Path | None = None,
        lease_seconds: int | None = None,
        timeout: float | None = None,
        ca_bundle: str | Path | None = None,
    ) -> ClientSettings:
        """Settings from flags (``None`` = not given) and the other sources."""
        flags: dict[str, Any] = {
            "ca_bundle": ca_bundle,
            "url": url,
            "workspace": workspace,
            "agent": agent,
            "profile": profile,
            "api_key_file": api_key_file,
            "lease_seconds": lease_seconds,
            "timeout": timeout,
        }
        given = _flag_values(flags)
        profile = given.get("profile") or os.environ.get(f"{ENV_PREFIX}PROFILE") or None
        merged: dict[str, Any] = {}
        # Lowest precedence first, so each higher source overwrites what it sets.
        for layer in (_profile_values(profile), _ctrlplane_values(), _env_values(), given):
            merged.update(layer)
        try:
            return cls(**merged)
        except PydanticValidationError as exc:
            raise ConfigError(f"invalid settings: {validation_problems(exc)}") from None

    def api_key_value(self) -> str | None:
        """The API key in clear, for the one place that sends it."""
        return self.api_key.get_secret_value() if self.api_key is not None else None


def profile_hint(settings: ClientSettings) -> str:
    """For the messages that say a setting is missing: ``"; or choose a profile of PATH: --profile
    ci"`` when the config file has profiles but none applied, else ``""``. None applied means no
    ``--profile`` and no ``default_profile``."""
    path = config_path()
    if settings.profile is not None or not path.is_file():
        return ""
    try:
        profiles = tomllib.loads(path.read_text(encoding="utf-8")).get("profiles")
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return ""
    if not isinstance(profiles, dict) or not profiles:
        return ""
    names = sorted(profiles)
    shown = " or ".join(f"--profile {name}" for name in names[:3])
    return f"; or choose a profile of {path} ({shown}), or set default_profile in it"


def validation_problems(exc: PydanticValidationError) -> str:
    """A pydantic validation error as one line, ``field: problem; …``, in our words and never with
    the input value. Pydantic's ``Value error, `` prefix is dropped, and bounds are said as
    bounds."""
    return "; ".join(
        f"{'.'.join(str(p) for p in err['loc']) or 'settings'}: {problem_text(err)}"
        for err in exc.errors(include_input=False, include_url=False)
    )


# pydantic's error types for a number out of bounds, and how we say them.
_BOUNDS = {
    "greater_than_equal": ("ge", "must be at least {}"),
    "greater_than": ("gt", "must be above {}"),
    "less_than_equal": ("le", "must be at most {}"),
    "less_than": ("lt", "must be below {}"),
}


def problem_text(err: Any) -> str:
    """One pydantic error's problem in our words (not its input)."""
    bound = _BOUNDS.get(str(err.get("type")))
    context = err.get("ctx") or {}
    if bound is not None and bound[0] in context:
        return bound[1].format(context[bound[0]])
    message = str(err.get("msg", ""))
    return message.removeprefix("Value error, ").removeprefix("Assertion failed, ")


# --- the job context: what `claim -o env` exports and `run` gives its child --------------------


@dataclass(frozen=True)
class JobContext:
    """The job a command acts on and the claim that fences it (``None``: no claim id)."""

    job_id: UUID
    claim_id: UUID | None


def parse_uuid(value: str, name: str) -> UUID:
    """``value`` as a UUID, or a usage error (exit 2) naming the argument ``name``."""
    try:
        return UUID(value.strip())
    except ValueError:
        raise UsageError(f"{name}: not a UUID: {value!r}") from None


def job_context(job_id: str | None = None, claim_id: str | None = None) -> JobContext:
    """The job and claim from the arguments, else ``JOBAGENTCTL_JOB_ID`` / ``_CLAIM_ID``.

    The one place these variables are read. Empty means unset, for the arguments and the
    variables alike (``claim -o env`` exports an empty claim id for a claim without a lease).
    """
    job_text = job_id or os.environ.get(JOB_ID_ENV) or None
    if job_text is None:
        raise UsageError(
            f"missing JOB_ID: pass it, or set {JOB_ID_ENV} (see: jobagentctl claim -o env)"
        )
    claim_text = claim_id or os.environ.get(CLAIM_ID_ENV) or None
    return JobContext(
        job_id=parse_uuid(job_text, "JOB_ID"),
        claim_id=parse_uuid(claim_text, "--claim-id") if claim_text is not None else None,
    )


# --- writing a profile (`server init --write-config`) ------------------------------------------


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        # A JSON string is a valid TOML basic string (same escapes, \uXXXX included).
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    raise ConfigError(f"cannot rewrite the config file: unsupported value {value!r}")


def _toml_key(key: str) -> str:
    if key and all(c.isalnum() or c in "-_" for c in key):
        return key
    return json.dumps(key)


def _toml_dump(data: dict[str, Any], prefix: str = "") -> str:
    lines: list[str] = []
    tables: list[tuple[str, dict[str, Any]]] = []
    for key, value in data.items():
        if isinstance(value, dict):
            tables.append((key, value))
        else:
            lines.append(f"{_toml_key(key)} = {_toml_value(value)}")
    out = "\n".join(lines)
    for key, table in tables:
        name = f"{prefix}.{_toml_key(key)}" if prefix else _toml_key(key)
        body = _toml_dump(table, name)
        has_scalars = any(not isinstance(v, dict) for v in table.values())
        header = f"[{name}]\n" if has_scalars or not table else ""
        out += ("\n\n" if out else "") + header + body
    return out


def _profiles_of(path: Path) -> dict[str, Any]:
    data = _load_toml(path) if path.exists() else {}
    profiles = data.get("profiles", {})
    if not isinstance(profiles, dict):
        raise ConfigError(f"{path}: 'profiles' is not a table")
    return profiles


def ensure_profile_free(name: str) -> None:
    """A :class:`ConfigError` if the config file already has ``[profiles.NAME]``."""
    path = config_path()
    if name in _profiles_of(path):
        raise ConfigError(
            f"profile {name!r} already exists in {path}: pass --force to replace it "
            "(its workspace and API key would be lost from the file)"
        )


def write_profile(name: str, values: dict[str, str], *, force: bool = False) -> Path:
    """Store ``[profiles.NAME]`` in the config file (the default profile if none is set).

    An existing profile of that name is replaced only with ``force``: it may hold the only copy
    of another workspace's key. The file is written 0600 through a temporary file and a rename.
    """
    path = config_path()
    data: dict[str, Any] = {}
    if path.exists():
        data = _load_toml(path)
    profiles = data.setdefault("profiles", {})
    if not isinstance(profiles, dict):
        raise ConfigError(f"{path}: 'profiles' is not a table")
    if not force:
        ensure_profile_free(name)
    profiles[name] = dict(values)
    data.setdefault("default_profile", name)
    # Top-level scalars must come before any table in TOML.
    ordered = {k: v for k, v in data.items() if not isinstance(v, dict)}
    ordered.update({k: v for k, v in data.items() if isinstance(v, dict)})
    text = _toml_dump(ordered) + "\n"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        # A 0600 temporary file renamed over the old one: the key is never readable by others,
        # even for an instant, and a crash leaves the old file intact.
        fd, tmp = tempfile.mkstemp(prefix=".config.", dir=path.parent)
    except OSError as exc:
        raise ConfigError(f"cannot write the config file {path}: {exc.strerror}") from exc
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.chmod(tmp, 0o600)
        os.replace(tmp, path)
    except OSError as exc:
        Path(tmp).unlink(missing_ok=True)
        raise ConfigError(f"cannot write the config file {path}: {exc.strerror}") from exc
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path
