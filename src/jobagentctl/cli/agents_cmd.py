"""`jobagentctl agents list|get|register|delete`: the workspace's job agents."""

from __future__ import annotations

from typing import Annotated

import typer

from jobagentctl.cli.context import get_state
from jobagentctl.models import AgentState

__all__ = ["AGENT_ID_NAMESPACE", "DEFAULT_AGENT_TYPE", "agents_app", "register"]

agents_app = typer.Typer(help="Job agents: list, get, register, delete.", no_args_is_help=True)

# `agents register NAME` without --id derives the id from workspace and name, so registering
# the same name twice updates one agent instead of creating two.
AGENT_ID_NAMESPACE = "jobagentctl:agent"

# The type ctrlplane's workspace-engine dispatches to pull agents (it marks their jobs queued);
# an agent of any other type there never gets a queued job. Our server stores the type and
# does not act on it.
DEFAULT_AGENT_TYPE = "http-pull"


@agents_app.command("list")
def list_agents(
    ctx: typer.Context,
    limit: Annotated[
        int, typer.Option("--limit", "-n", min=1, max=1000, help="Page size (1–1000).")
    ] = 50,
    all_pages: Annotated[bool, typer.Option("--all-pages", help="Fetch every page.")] = False,
    presence: Annotated[
        AgentState | None,
        typer.Option(
            "--state",
            help="Only agents in this state: busy (seen, running a job), idle (seen, no job), "
            "offline (not seen within the server's presence window, whatever it holds).",
            show_default=False,
        ),
    ] = None,
) -> None:
    """List the workspace's job agents, with their presence (STATE, LAST SEEN, and HELD). HELD
    counts its jobs in progress and revoked claims not let go, whatever its state.

    --state filters on the server. A server without presence (ctrlplane) shows STATE and
    LAST SEEN as "-", and --state then matches nothing (said on stderr).

    \b
    Example:
      jobagentctl agents list --state offline -o json | jq -r '.[].id'
    """
    from jobagentctl.cli import output
    from jobagentctl.client import iter_pages

    state = get_state(ctx)
    with state.client() as client:
        if all_pages:
            agents = list(
                iter_pages(lambda n, off: client.list_agents(limit=n, offset=off, state=presence))
            )
        else:
            page = client.list_agents(limit=limit, state=presence)
            agents, total = page.items, page.total
    if presence is not None:
        if any(agent.state is None for agent in agents):
            output.warn("this server does not report agent presence: --state matches nothing")
        agents = [agent for agent in agents if agent.state == presence]
    output.emit(state, "agent", agents, title="job agents")
    if not all_pages:
        output.more_hint(state, len(agents), total)


@agents_app.command("get")
def get_agent(
    ctx: typer.Context,
    agent_id: Annotated[
        str | None, typer.Argument(metavar="AGENT_ID", help="Default: --agent / JOBAGENTCTL_AGENT.")
    ] = None,
) -> None:
    """Show one job agent with its config.

    \b
    Example:
      jobagentctl agents get 6f1c2d3e-…
    """
    from jobagentctl.cli import output
    from jobagentctl.cli.params import uuid_arg

    state = get_state(ctx)
    agent = uuid_arg(agent_id, "AGENT_ID") if agent_id else state.require_agent()
    with state.client() as client:
        found = client.get_agent(agent)
    output.emit(state, "agent", found)


@agents_app.command("register")
def register_agent(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(metavar="NAME", help="The agent's name.")],
    agent_id: Annotated[
        str | None,
        typer.Option(
            "--id", metavar="UUID", help="Its id (default: derived from workspace and name)."
        ),
    ] = None,
    agent_type: Annotated[
        str,
        typer.Option(
            "--type",
            metavar="T",
            help="Agent type (ctrlplane dispatches pull agents' jobs only to http-pull).",
        ),
    ] = DEFAULT_AGENT_TYPE,
    config: Annotated[
        str | None,
        typer.Option("--config", metavar="JSON", help="Agent config: JSON, @FILE or @- (stdin)."),
    ] = None,
) -> None:
    """Create or update a job agent and print it.

    Registering the same NAME again updates the same agent (its id is derived from the
    workspace and the name unless --id is given).

    \b
    Example:
      export JOBAGENTCTL_AGENT=$(jobagentctl agents register builder -o json | jq -r .id)
      jobagentctl agents register builder --config '{"leaseSeconds": 120}'
    """
    from uuid import NAMESPACE_URL, uuid5

    from jobagentctl.cli import output
    from jobagentctl.cli.params import json_object, uuid_arg

    state = get_state(ctx)
    settings_config = json_object(config, "--config") or {}
    workspace = state.require_workspace()
    if agent_id:
        agent = uuid_arg(agent_id, "--id")
    else:
        agent = uuid5(NAMESPACE_URL, f"{AGENT_ID_NAMESPACE}/{workspace}/{name}")
    with state.client() as client:
        client.upsert_agent(agent, name, agent_type, settings_config)
        registered = client.get_agent(agent)
    output.emit(state, "agent", registered)
    output.info(state, f"agent {name}: {agent} (export JOBAGENTCTL_AGENT={agent})")


@agents_app.command("delete")
def delete_agent(
    ctx: typer.Context,
    agent_id: Annotated[str, typer.Argument(metavar="AGENT_ID", help="The agent to delete.")],
) -> None:
    """Delete a job agent.

    \b
    Example:
      jobagentctl agents delete 6f1c2d3e-…
    """
    from jobagentctl.cli import output
    from jobagentctl.cli.params import uuid_arg

    state = get_state(ctx)
    agent = uuid_arg(agent_id, "AGENT_ID")
    with state.client() as client:
        accepted = client.delete_agent(agent)
    output.emit_accepted(state, accepted, f"agent {agent}: deleted")


def register(app: typer.Typer) -> None:
    """Add the ``agents`` command group to ``app``."""
    app.add_typer(agents_app, name="agents")
