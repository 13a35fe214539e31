"""The ``gpucloud-nb`` command: run the local sandbox cloud in the foreground.

    $ gpucloud-nb sandbox --port 8765 --launch-seconds 5
    management: http://127.0.0.1:8765
    inference: http://127.0.0.1:8765/inference

The two lines come first, each flushed, so a script can read them; then uvicorn logs to stderr.
``--port 0`` picks a free port. Without ``--api-key`` the sandbox uses the public default key
(``gpucloud_nb.sandbox.DEFAULT_API_KEY``, no secret) and prints a ready ``curl`` line with it and
its header (``x-api-key``); a custom key or secret is never printed (the line then reads
``$GPUCLOUD_API_KEY``).
Ctrl-C or SIGTERM stops the server and exits with status 0.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

__all__ = ["build_parser", "main"]


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not value >= 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r} must be zero or more seconds")
    return value


def _positive(text: str) -> float:
    value = _seconds(text)
    if value == 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be more than zero")
    return value


def _port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"{text!r} is not between 0 and 65535")
    return value


def _count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} must be at least 1")
    return value


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``gpucloud-nb`` and its subcommands."""
    parser = argparse.ArgumentParser(
        prog="gpucloud-nb",
        description="Use a GPU rental cloud from a notebook; run its local sandbox.",
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    sandbox = commands.add_parser(
        "sandbox",
        help="serve the local sandbox cloud (management and inference) over HTTP",
        description="Serve the sandbox cloud in the foreground until Ctrl-C or SIGTERM.",
    )
    sandbox.add_argument("--host", default="127.0.0.1", help="address to bind (default: %(default)s)")
    sandbox.add_argument("--port", type=_port, default=8765,
                         help="port to bind; 0 picks a free one (default: %(default)s)")
    sandbox.add_argument("--api-key", metavar="KEY", default=None,
                         help="management key clients must send (default: the public sandbox key)")
    sandbox.add_argument("--inference-secret", metavar="SECRET", default=None,
                         help="inference secret clients must send "
                              "(default: the public sandbox secret)")
    sandbox.add_argument("--state", metavar="FILE", default=None,
                         help="SQLite file that keeps resources across restarts (default: memory)")
    sandbox.add_argument("--launch-seconds", type=_seconds, default=3.0, metavar="F",
                         help="how long a new instance stays pending (default: %(default)s)")
    sandbox.add_argument("--delete-seconds", type=_seconds, default=1.0, metavar="F",
                         help="how long a deleted instance stays deleting (default: %(default)s)")
    sandbox.add_argument("--latency", type=_seconds, default=0.0, metavar="F",
                         help="seconds added to every management request (default: %(default)s)")
    sandbox.add_argument("--upstream", metavar="URL", default=None,
                         help="a chat-completion server the inference endpoint forwards to")
    sandbox.add_argument("--inference-rate-limit", type=_positive, default=None, metavar="F",
                         help="inference requests per second per secret before 429")
    sandbox.add_argument("--synthetic-offers", type=_count, default=None, metavar="N",
                         help="serve N generated offers instead of the default catalogue")
    sandbox.add_argument("--faults", metavar="SPEC", default=None,
                         help="inject faults into the management API, e.g. "
                              "'error_every=3,rate_limit_every=5,slow_every=2,drop_create_every=4,"
                              "extra_fields' (see gpucloud_nb.sandbox.faults)")
    sandbox.add_argument("--allow-url-fetch", action="store_true",
                         help="let the inference endpoint download http(s) image URLs "
                              "(public addresses only; default: refuse them)")
    sandbox.set_defaults(handler=_run_sandbox)
    return parser


def _run_sandbox(args: argparse.Namespace) -> int:
    from gpucloud_nb.sandbox import DEFAULT_API_KEY, DEFAULT_INFERENCE_SECRET, SandboxConfig
    from gpucloud_nb.sandbox.server import serve

    offers = None
    if args.synthetic_offers is not None:
        from gpucloud_nb.sandbox.catalogue import synthetic_offers

        offers = synthetic_offers(args.synthetic_offers)
    faults = None
    if args.faults is not None:
        from gpucloud_nb.sandbox.faults import Faults

        try:
            faults = Faults.parse(args.faults)
        except ValueError as error:
            print(f"gpucloud-nb sandbox: error: --faults: {error}", file=sys.stderr)
            return 2
    try:
        config = SandboxConfig(
            host=args.host,
            port=args.port,
            api_key=args.api_key if args.api_key is not None else DEFAULT_API_KEY,
            inference_secret=(args.inference_secret if args.inference_secret is not None
                              else DEFAULT_INFERENCE_SECRET),
            state=args.state,
            launch_seconds=args.launch_seconds,
            delete_seconds=args.delete_seconds,
            latency=args.latency,
            upstream=args.upstream,
            inference_rate_limit=args.inference_rate_limit,
            offers=offers,
            faults=faults,
            allow_url_fetch=args.allow_url_fetch,
        )
    except ValueError as error:
        print(f"gpucloud-nb sandbox: error: {error}", file=sys.stderr)
        return 2

    def ready(management: str, inference: str) -> None:
        print(f"management: {management}", flush=True)
        print(f"inference: {inference}", flush=True)
        defaults = [name for name, given in (("API key", args.api_key),
                                             ("inference secret", args.inference_secret))
                    if given is None]
        if defaults:
            print(f"gpucloud-nb sandbox: using the public default {' and '.join(defaults)} "
                  "(gpucloud_nb.sandbox.DEFAULT_API_KEY / DEFAULT_INFERENCE_SECRET).",
                  file=sys.stderr, flush=True)
        # A ready request to try: the public default key is no secret; a custom one is masked.
        key = config.api_key if args.api_key is None else "$GPUCLOUD_API_KEY"
        print(f"try: curl -H 'x-api-key: {key}' {management}/gpu-cloud/instances/offers",
              file=sys.stderr, flush=True)

    try:
        serve(config, ready)
    except ValueError as error:  # the --state file is refused (StateFileError): one line
        print(f"gpucloud-nb sandbox: error: --state: {error}", file=sys.stderr)
        return 2
    except OSError as error:
        print(f"gpucloud-nb sandbox: error: cannot serve on {args.host}:{args.port}: "
              f"{error.strerror or error}", file=sys.stderr)
        return 1
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``gpucloud-nb`` with ``argv`` (default: the command line); return the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if getattr(args, "handler", None) is None:
        parser.print_help()
        return 2
    return int(args.handler(args))


if __name__ == "__main__":
    sys.exit(main())
