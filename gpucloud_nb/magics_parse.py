"""The ``%gpucloud`` command line: its grammar, parsing, and refusing secrets typed into it.

:func:`parse` turns a line into an :class:`argparse.Namespace`; a usage error raises
:class:`Stop` with one line (never ``SystemExit``), ``--help`` raises :class:`HelpShown` after
printing. An option that would put a key or secret into a cell is refused before parsing, and
unrecognised words are shown with their values hidden.

    >>> parse("volumes list").volumes_command
    'list'
"""

from __future__ import annotations

import argparse
import re
import shlex
from collections.abc import Sequence
from functools import lru_cache
from typing import Any, NoReturn

from gpucloud_nb import magics_ai, magics_endpoints, magics_move
from gpucloud_nb.client.management import DEPLOYMENT_TYPES
from gpucloud_nb.durations import parse_duration

__all__ = ["COMMANDS", "PROG", "SECRET_OPTIONS", "VOLUME_COMMANDS", "HelpShown", "Stop", "parse"]

PROG = "%gpucloud"
COMMANDS = ("connect", "offers", "instances", "instance", "delete", "launch", "chat", "spend",
            "budget", "kernel", "volumes", "endpoints", *magics_move.COMMANDS,
            *magics_ai.COMMANDS)
VOLUME_COMMANDS = ("list", "offers", "create", "get", "delete")
#: Options that would put a secret into a cell; refused before parsing.
SECRET_OPTIONS = ("--api-key", "--api_key", "--apikey", "--key", "--secret", "--inference-secret")


class Stop(Exception):
    """End the command: ``message`` (if any) is printed to stderr and the magic returns None."""

    def __init__(self, message: str = "") -> None:
        super().__init__(message)
        self.message = message


class HelpShown(Exception):
    """argparse printed help (or usage) and would have exited."""


class _Parser(argparse.ArgumentParser):
    """An ArgumentParser that never exits the process: errors become one line of usage error."""

    def error(self, message: str) -> NoReturn:
        raise Stop(f"{self.prog}: {message}; try {self.prog} --help")

    def exit(self, status: int = 0, message: str | None = None) -> NoReturn:
        if message:
            raise Stop(message.strip())
        raise HelpShown()


_NUMBER = re.compile(r"[0-9]+(?:\.[0-9]+)?", re.ASCII)


def _size(text: str) -> int | float:
    # float() would also take "1_000", "١٠٠" (Arabic-Indic digits) and "nan": plain digits only.
    if not _NUMBER.fullmatch(text.removeprefix("-")):
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of GB")
    value = float(text)
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive number of GB")
    return int(value) if value.is_integer() else value


def _dollars(text: str) -> float:
    # as _size: plain digits only (no "nan", no "1_000")
    if not _NUMBER.fullmatch(text.removeprefix("-")) or not float(text) > 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive number of dollars")
    return float(text)


def _gpus(text: str) -> int:
    # int() would also take "1_0" and non-ASCII digits: plain digits 0-9 only.
    if not (text.isascii() and text.removeprefix("-").isdigit()):
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of GPUs")
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive number of GPUs")
    return value


def _duration(text: str) -> str:
    # Checked here, by the one parser; the form's field takes the text as typed.
    try:
        parse_duration(text, "The duration")
    except ValueError as bad:
        raise argparse.ArgumentTypeError(str(bad)) from None
    return text


SYNOPSIS = """\
commands (each has its own --help):
  %gpucloud connect [--sandbox | --base-url URL]
  %gpucloud offers [--gpu NAME] [--gpus N] [--region R] [--type vm|container|baremetal] [--all]
  %gpucloud instances [--type vm|container|baremetal] [--all]
  %gpucloud instance INSTANCE                (INSTANCE: a name or an _id)
  %gpucloud delete INSTANCE [--yes]
  %gpucloud launch [OFFER_ID] [--provider ID] [--budget DOLLARS] [--idle 30m]
                   [--delete-after 2h]
  %gpucloud chat [ENDPOINT] [--model MODEL]
  %gpucloud spend [--all]
  %gpucloud budget                           (your budget and your instances', through a gateway)
  %gpucloud volumes [list]
  %gpucloud volumes offers
  %gpucloud volumes create NAME --size GB --region R [--provider ID]
  %gpucloud volumes get ID
  %gpucloud volumes delete ID [--yes]
{endpoints}
{ai}
  %%gpucloud run INSTANCE [--python] [--timeout S]   (the cell runs on the instance)
  %%gpucloud run --nodes NAME1,NAME2,… [--python]   (on every node at once, ranks set)
  %gpucloud put LOCAL INSTANCE:REMOTE
  %gpucloud get INSTANCE:REMOTE LOCAL
  %gpucloud kernel INSTANCE [--delete-on-shutdown] [--display-name NAME]
{move}

Results are returned, so `df = %gpucloud offers --gpu H100` works.
Quote names with spaces: %gpucloud volumes create "my data" --size 100 --region us-east-1""".replace(
    "{endpoints}", magics_endpoints.SYNOPSIS).replace("{move}", magics_move.SYNOPSIS).replace(
    "{ai}", magics_ai.SYNOPSIS)


def _sub(subparsers: Any, name: str, summary: str, example: str) -> _Parser:
    prefix = f"{PROG} volumes" if subparsers.dest == "volumes_command" else PROG
    parser: _Parser = subparsers.add_parser(
        name, description=summary, epilog=f"example: {example}", prog=f"{prefix} {name}",
        allow_abbrev=False, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    return parser


@lru_cache(maxsize=1)
def _parser() -> _Parser:
    """The parser of the whole ``%gpucloud`` command line, built once."""
    root = _Parser(
        prog=PROG, usage="%%gpucloud COMMAND [ARGUMENTS] [--help]", allow_abbrev=False,
        description="Use the GPU cloud from a notebook: offers, instances, volumes, launch, chat.",
        epilog=SYNOPSIS, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = root.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser,
                                   help=argparse.SUPPRESS)

    p = _sub(commands, "connect", "Choose the cloud for this session (the key is never typed "
             "in the cell).", "%gpucloud connect --base-url https://api.example-gpu.cloud")
    where = p.add_mutually_exclusive_group()
    where.add_argument("--sandbox", action="store_true", help="use the local sandbox cloud")
    where.add_argument("--base-url", metavar="URL", help="the cloud's base URL; the key comes "
                       "from GPUCLOUD_API_KEY or a hidden prompt")
    p.set_defaults(handler="connect")

    p = _sub(commands, "offers", "Instance offers as a DataFrame, one row per offer and region.",
             "df = %gpucloud offers --gpu H100 --gpus 8 --type vm")
    p.add_argument("--gpu", metavar="NAME", help="part of the GPU name, e.g. H100")
    p.add_argument("--gpus", metavar="N", type=_gpus, help="number of GPUs")
    p.add_argument("--region", metavar="R", help="region id, e.g. us-east-1")
    p.add_argument("--type", choices=DEPLOYMENT_TYPES, help="deployment type")
    p.add_argument("--all", action="store_true", help="include rows that are not available")
    p.set_defaults(handler="offers")

    p = _sub(commands, "instances", "Your instances as a DataFrame, newest first.",
             "%gpucloud instances --type vm")
    p.add_argument("--type", choices=DEPLOYMENT_TYPES, help="deployment type")
    p.add_argument("--all", action="store_true", help="include deleted instances")
    p.set_defaults(handler="instances")

    p = _sub(commands, "instance", "One instance in full.", "%gpucloud instance my-box")
    p.add_argument("id", metavar="INSTANCE", help="the instance's name or _id")
    p.set_defaults(handler="instance")

    p = _sub(commands, "delete", "Delete an instance (its data is lost unless on a volume).",
             "%gpucloud delete my-box --yes")
    p.add_argument("id", metavar="INSTANCE", help="the instance's name or _id")
    p.add_argument("--yes", "-y", action="store_true", help="do not ask for confirmation")
    p.set_defaults(handler="delete")

    p = _sub(commands, "launch", "The launch form, prefilled with an offer when given.",
             "%gpucloud launch nimbus-h100-sxm5-1x-vm")
    p.add_argument("offer", metavar="OFFER_ID", nargs="?", help="an offer's instanceId")
    p.add_argument("--provider", metavar="ID", help="provider _id or name; needed when several "
                   "providers sell offers with this instanceId")
    p.add_argument("--budget", metavar="DOLLARS", type=_dollars,
                   help="delete the instance once it has cost this much (the form's budget)")
    p.add_argument("--idle", metavar="DURATION", type=_duration,
                   help="delete it once idle this long, e.g. 30m or 1h30m (no SSH session, no "
                   "busy kernel, GPU under 5 %%)")
    p.add_argument("--delete-after", metavar="DURATION", type=_duration,
                   help="delete it this long after the launch, e.g. 2h or 90m")
    p.set_defaults(handler="launch")

    p = _sub(commands, "chat", "The chat widget for an inference endpoint (the sandbox's by "
             "default).", "%gpucloud chat https://abc123-9f8e.inference.example-gpu.cloud/")
    p.add_argument("endpoint", metavar="ENDPOINT", nargs="?",
                   help="the inference instance's URL; its secret is asked for")
    p.add_argument("--model", metavar="MODEL", help="the model identifier (default: the first)")
    p.set_defaults(handler="chat")

    p = _sub(commands, "kernel", "Install a notebook kernel that runs on the instance "
             "(then Kernel → Change Kernel).", "%gpucloud kernel train-1 --delete-on-shutdown")
    p.add_argument("instance", metavar="INSTANCE", help="the instance's _id or name")
    p.add_argument("--delete-on-shutdown", action="store_true",
                   help="delete the instance when the kernel shuts down")
    p.add_argument("--display-name", metavar="NAME", help="the name in the kernel menu")
    p.set_defaults(handler="kernel")

    p = _sub(commands, "spend", "Spend so far as a DataFrame, with a total row.", "%gpucloud spend")
    p.add_argument("--all", action="store_true", help="show deleted instances too")
    p.set_defaults(handler="spend")

    p = _sub(commands, "budget", "Your budget and your instances' budgets through a gateway: "
             "spent, left, warnings.",
             "%gpucloud budget")
    p.set_defaults(handler="budget")

    volumes = _sub(commands, "volumes", "Persistent volumes, which keep data beyond the life of "
                   "an instance.", '%gpucloud volumes create "my data" --size 100 --region us-east-1')
    volumes.usage = "%%gpucloud volumes [COMMAND] [ARGUMENTS] [--help]"
    volumes.epilog = "commands (each has its own --help):\n" + "\n".join(
        line for line in SYNOPSIS.splitlines() if line.startswith("  %gpucloud volumes"))
    volumes.set_defaults(handler="volumes_list")
    actions = volumes.add_subparsers(dest="volumes_command", metavar="COMMAND",
                                     parser_class=_Parser, help=argparse.SUPPRESS)

    p = _sub(actions, "list", "Your volumes as a DataFrame, newest first.", "%gpucloud volumes")
    p.set_defaults(handler="volumes_list")

    p = _sub(actions, "offers", "Volume offers as a DataFrame.", "%gpucloud volumes offers")
    p.set_defaults(handler="volumes_offers")

    p = _sub(actions, "create", "Create a volume.",
             '%gpucloud volumes create "my data" --size 100 --region us-east-1')
    p.add_argument("name", metavar="NAME", help="the volume's name (quote it if it has spaces)")
    p.add_argument("--size", metavar="GB", type=_size, required=True, help="size in GB")
    p.add_argument("--region", metavar="R", required=True, help="region id, e.g. us-east-1")
    p.add_argument("--provider", metavar="ID", help="provider _id or display name; optional "
                   "when one provider alone sells volumes in the region")
    p.set_defaults(handler="volumes_create")

    p = _sub(actions, "get", "One volume.", "%gpucloud volumes get ID")
    p.add_argument("id", metavar="ID", help="the volume _id")
    p.set_defaults(handler="volumes_get")

    p = _sub(actions, "delete", "Delete a volume and the data on it.",
             "%gpucloud volumes delete ID --yes")
    p.add_argument("id", metavar="ID", help="the volume _id")
    p.add_argument("--yes", "-y", action="store_true", help="do not ask for confirmation")
    p.set_defaults(handler="volumes_delete")

    magics_endpoints.add_parser(commands, _sub, _Parser)
    magics_move.add_parser(commands, _sub, _Parser)
    magics_ai.add_parser(commands, _sub, _Parser)
    return root


def _check_words(words: Sequence[str]) -> None:
    """Refuse secret options and unknown subcommands with one sentence, before argparse."""
    for word in words:
        option = word.split("=", 1)[0].lower().replace("_", "-")
        if option in SECRET_OPTIONS and "secret" in option:
            raise Stop(
                f"{PROG}: {option} is refused: a secret typed into a cell is saved in the "
                "notebook and its history; %gpucloud chat ENDPOINT asks for it in a hidden prompt."
            )
        if option in SECRET_OPTIONS:
            raise Stop(
                f"{PROG}: {option} is refused: a key typed into a cell is saved in the notebook "
                "and its history; set GPUCLOUD_API_KEY, or run %gpucloud connect --base-url URL "
                "and type the key when asked."
            )
    if words and not words[0].startswith("-") and words[0] not in COMMANDS:
        raise Stop(f"{PROG}: unknown subcommand {_word(words[0])}; try {PROG} --help")
    if (len(words) > 1 and words[0] == "volumes" and not words[1].startswith("-")
            and words[1] not in VOLUME_COMMANDS):
        raise Stop(f"{PROG} volumes: unknown subcommand {_word(words[1])}; "
                    f"try {PROG} volumes --help")
    if (len(words) > 1 and words[0] == "endpoints" and not words[1].startswith("-")
            and words[1] not in magics_endpoints.COMMANDS):
        raise Stop(f"{PROG} endpoints: unknown subcommand {_word(words[1])}; "
                    f"try {PROG} endpoints --help")


def _word(word: str) -> str:
    """A word of the cell, quoted, in an error: a long one (a pasted key?) is cut to its start."""
    return repr(word) if len(word) <= 24 else repr(word[:8] + "…")


def _masked(extra: Sequence[str]) -> str:
    """Unrecognized arguments for an error, with option values hidden.

    ``--API-KEY=sk-…`` shows as ``--API-KEY=…``, and the word after an unknown option (its value,
    most likely) as ``…``: the cell may hold a secret under a name we do not know.
    """
    shown: list[str] = []
    after_option = False
    for word in extra:
        if word.startswith("-"):
            name, has_value, _ = word.partition("=")
            shown.append(name + ("=…" if has_value else ""))
            after_option = not has_value
        else:
            shown.append("…" if after_option else word)
            after_option = False
    return " ".join(shown)


def parse(line: str) -> argparse.Namespace:
    """Parse a ``%gpucloud`` line; raises ``Stop`` (usage error) or ``HelpShown``."""
    try:
        words = shlex.split(line)
    except ValueError as error:
        raise Stop(f"{PROG}: {error} in the arguments; check the quotes") from None
    _check_words(words)
    args, extra = _parser().parse_known_args(words)
    if extra:
        where = " ".join(w for w in (PROG, args.command, getattr(args, "volumes_command", None),
                                     getattr(args, "endpoints_command", None)) if w)
        raise Stop(f"{where}: unrecognized arguments: {_masked(extra)}; try {where} --help")
    if args.command is None:
        _parser().print_help()
        raise HelpShown()
    return args
