"""``%gpucloud endpoints``: the cloud's inference instances from a cell (list, models, hardwares,
create or the deploy form, start, stop, delete). Its grammar is added to ``magics_parse`` by
:func:`add_parser`; ``magics`` calls :func:`run`.

    %gpucloud endpoints                               # a DataFrame: status, ready/total, $/h
    %gpucloud endpoints models
    %gpucloud endpoints create chat --model sandbox-vision-1 --min 0 --max 2 --cooldown 300
    %gpucloud endpoints create                        # the deploy form
    %gpucloud endpoints stop chat

Chosen: ``create`` returns at once (the instance deploys on its own; ``%gpucloud endpoints``
shows its progress); ``delete`` asks first unless ``--yes``, as instance deletes do.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gpucloud_nb.client.management import GPUCloud

__all__ = ["COMMANDS", "SYNOPSIS", "add_parser", "run"]

COMMANDS = ("list", "models", "hardwares", "create", "start", "stop", "delete")
SYNOPSIS = """\
  %gpucloud endpoints [list]                 (inference instances: deployed models)
  %gpucloud endpoints models | hardwares
  %gpucloud endpoints create [NAME --model M] [--hardware H] [--region R] [--min N] [--max N] [--cooldown S]
  %gpucloud endpoints start|stop NAME
  %gpucloud endpoints delete NAME [--yes]"""


def _count(text: str) -> int:
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of containers")
    return int(text)


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value >= 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds")
    return value


def add_parser(commands: Any, sub: Callable[..., Any], parser_class: type) -> None:
    """Add ``endpoints`` and its subcommands to ``commands`` (``sub`` makes one parser)."""
    endpoints = sub(commands, "endpoints", "Inference instances: deploy a model as an "
                    "endpoint, scale it, start, stop and delete it.",
                    "%gpucloud endpoints create chat --model sandbox-vision-1 --min 0")
    endpoints.usage = "%%gpucloud endpoints [COMMAND] [ARGUMENTS] [--help]"
    endpoints.epilog = "commands (each has its own --help):\n" + SYNOPSIS
    endpoints.set_defaults(handler="endpoints")
    actions = endpoints.add_subparsers(dest="endpoints_command", metavar="COMMAND",
                                       parser_class=parser_class, help=argparse.SUPPRESS)

    def action(name: str, summary: str, example: str) -> Any:
        parser = sub(actions, name, summary, example)
        parser.prog = f"%gpucloud endpoints {name}"
        parser.set_defaults(handler="endpoints")
        return parser

    action("list", "Your inference instances as a DataFrame.", "%gpucloud endpoints")
    action("models", "The catalogue's models, with the default hardware's price per hour.",
           "%gpucloud endpoints models")
    action("hardwares", "The catalogue's hardwares, with price per hour and capacity.",
           "%gpucloud endpoints hardwares")
    p = action("create", "Deploy a model; with no NAME, the deploy form.",
               "%gpucloud endpoints create chat --model sandbox-vision-1 --min 0 --max 2")
    p.add_argument("name", metavar="NAME", nargs="?", help="the endpoint's name")
    p.add_argument("--model", metavar="M", help="a catalogue model's id or name")
    p.add_argument("--hardware", metavar="H", help="hardware id or name (default: the model's)")
    p.add_argument("--region", metavar="R", help="region id (default: the first with capacity)")
    p.add_argument("--min", metavar="N", type=_count, default=0,
                   help="fewest containers per region; 0 scales to zero (default 0)")
    p.add_argument("--max", metavar="N", type=_count, default=1,
                   help="most containers per region (default 1)")
    p.add_argument("--cooldown", metavar="S", type=_seconds,
                   help="seconds without requests before it scales down")
    for name, summary in (("start", "Start a stopped endpoint."),
                          ("stop", "Stop an endpoint: no containers, nothing billed.")):
        p = action(name, summary, f"%gpucloud endpoints {name} chat")
        p.add_argument("name", metavar="NAME", help="the endpoint's name or _id")
    p = action("delete", "Delete an endpoint.", "%gpucloud endpoints delete chat --yes")
    p.add_argument("name", metavar="NAME", help="the endpoint's name or _id")
    p.add_argument("--yes", "-y", action="store_true", help="do not ask for confirmation")


def run(cloud: GPUCloud, args: argparse.Namespace, *, say: Callable[[str], None],
        confirm: Callable[[str, str], bool], stop: Callable[[str], Exception]) -> Any:
    """Carry out one ``%gpucloud endpoints`` command; its result is the cell's value."""
    endpoints = cloud.inference_instances
    command = args.endpoints_command or "list"  # a bare `%gpucloud endpoints`
    if command == "list":
        from gpucloud_nb.inference_frames import endpoints_frame

        return endpoints_frame([endpoints.get(e.id) for e in endpoints.list()])
    if command == "models":
        return endpoints.models_frame()
    if command == "hardwares":
        return endpoints.hardwares_frame()
    if command == "create":
        if args.name is None:
            from gpucloud_nb.widgets.deploy_form import DeployForm

            return DeployForm(cloud, model=args.model)
        if args.model is None:
            raise stop("Give the model: %gpucloud endpoints create NAME --model M "
                       "(%gpucloud endpoints models lists them).")
        made = endpoints.create(name=args.name, model=args.model, hardware=args.hardware,
                                region=args.region, min=args.min, max=args.max,
                                cooldown=args.cooldown)
        say(f"Deploying {made.name} ({made.id}); %gpucloud endpoints shows its containers "
            "ready.")
        return None
    if command in ("start", "stop"):
        details = getattr(endpoints, command)(args.name)
        say(f"{'Started' if command == 'start' else 'Stopped'} {details.name}: it is "
            f"{details.status}.")
        return None
    details = endpoints.get(args.name)
    if not args.yes and not confirm(
            f"Delete endpoint {details.name} ({details.id})?",
            f"Could not ask for confirmation here; add --yes to delete endpoint {details.name}."):
        say(f"Cancelled: endpoint {details.name} was not deleted.")
        return None
    endpoints.delete(details.id)
    say(f"Deleted endpoint {details.name}.")
    return None
