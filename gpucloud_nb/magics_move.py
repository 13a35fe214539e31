"""``%gpucloud checkpoint``, ``restore`` and ``move``: a kernel's variables kept, brought back,
and carried to another instance. Its grammar is added to ``magics_parse`` by :func:`add_parser`;
``magics`` calls :func:`run`, which calls :mod:`gpucloud_nb.kernel.session`.

    %gpucloud checkpoint                        # to .gpucloud/checkpoints/ here, newest 5 kept
    %gpucloud checkpoint --every 15min          # in the background while idle; --every off
    %gpucloud restore                           # the newest checkpoint, into this kernel
    %gpucloud restore 20261128T1502 big-box     # that checkpoint, onto instance big-box
    %gpucloud move big-box                      # this session, to instance big-box
    %gpucloud move --gpu H100 --max-price 3     # to a new instance from the cheapest fit

These need no key in the kernel: on an instance, the provisioner that started the kernel does the
cloud's part.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

__all__ = ["COMMANDS", "SYNOPSIS", "add_parser", "run"]

COMMANDS = ("checkpoint", "restore", "move")
SYNOPSIS = """\
  %gpucloud checkpoint [--keep N] [--every 15min|off]  (this kernel's variables, to .gpucloud/checkpoints/)
  %gpucloud restore [CHECKPOINT] [INSTANCE]  (into this kernel, or onto INSTANCE)
  %gpucloud move INSTANCE | --gpu MODEL [--max-price DOLLARS] [--keep] [--limit-gb GB]"""


def _positive(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive number")
    return value


def _count(text: str) -> int:
    if not (text.isascii() and text.isdigit()) or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of at least 1")
    return int(text)


def _every(text: str) -> float | str:
    from gpucloud_nb.durations import parse_duration

    if text.strip().lower() in ("off", "status"):  # status: --every alone
        return text.strip().lower()
    try:
        return parse_duration(text, "--every")
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error).rstrip(".")) from None


def add_parser(commands: Any, sub: Callable[..., Any], parser_class: type) -> None:
    """Add ``checkpoint``, ``restore`` and ``move`` to ``commands`` (``sub`` makes a parser)."""
    p = sub(commands, "checkpoint", "Save this kernel's variables to the notebook's folder "
            "(.gpucloud/checkpoints/), keeping the newest N.", "%gpucloud checkpoint --keep 3")
    p.add_argument("--keep", type=_count, default=5, help="checkpoints kept (default 5)")
    p.add_argument("--limit-gb", type=_positive, default=None,
                   help="refuse above this size (default GPUCLOUD_MOVE_LIMIT_GB or 20)")
    p.add_argument("--every", type=_every, nargs="?", const="status", default=None,
                   metavar="DURATION", help="checkpoint in the background every DURATION while "
                   "the kernel is idle (e.g. 15min); 'off' stops; alone, says what it did")
    p.set_defaults(handler="session")

    p = sub(commands, "restore", "Restore a checkpoint (default: the newest) into this kernel, "
            "or onto INSTANCE (the kernel moves there first).",
            "%gpucloud restore 20261128T1502 big-box")
    p.add_argument("checkpoint", nargs="?", default=None, metavar="CHECKPOINT",
                   help="part of a checkpoint's file name (default: the newest)")
    _target(p, "an instance name or id to restore onto",
            "restore onto a new instance with this GPU")
    p.set_defaults(handler="session")

    p = sub(commands, "move", "Move this kernel, with its variables, to another instance; the "
            "old one is deleted once the new kernel holds them (unless --keep).",
            "%gpucloud move --gpu H100 --max-price 3")
    _target(p, "an instance name or id (else --gpu/--max-price launch one)",
            "launch a new instance with this GPU model")
    p.add_argument("--keep", action="store_true", help="keep the old instance")
    p.add_argument("--limit-gb", type=_positive, default=None,
                   help="refuse above this size (default GPUCLOUD_MOVE_LIMIT_GB or 20)")
    p.set_defaults(handler="session")


def _target(p: Any, instance_help: str, gpu_help: str) -> None:
    """Where to go: an existing instance, or a new one chosen by GPU and highest price."""
    p.add_argument("target", nargs="?", default=None, metavar="INSTANCE", help=instance_help)
    p.add_argument("--gpu", default=None, help=gpu_help)
    p.add_argument("--max-price", type=_positive, default=None, metavar="DOLLARS",
                   help="the new instance's highest price per hour")


def run(args: argparse.Namespace, say: Callable[[str], None]) -> None:
    """Run the parsed command; it prints what it did (the Python functions of
    :mod:`gpucloud_nb.kernel.session` also return it)."""
    from gpucloud_nb.kernel import session

    if args.command == "checkpoint" and args.every is not None:
        from gpucloud_nb.kernel import background

        if args.every == "status":
            say(background.status())
        else:
            say(background.every(None if args.every == "off" else float(args.every),
                                 keep=args.keep, limit_gb=args.limit_gb))
    elif args.command == "checkpoint":
        session.checkpoint(keep=args.keep, limit_gb=args.limit_gb, say=say)
    elif args.command == "restore":
        session.restore(args.checkpoint, args.target, gpu=args.gpu, max_price=args.max_price,
                        say=say)
    else:
        session.move(args.target, gpu=args.gpu, max_price=args.max_price, keep=args.keep,
                     limit_gb=args.limit_gb, say=say)
