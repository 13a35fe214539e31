"""The ``gpucloud-nb`` command: run the local sandbox cloud, or manage your sandbox service.

    $ gpucloud-nb sandbox --port 8765 --launch-seconds 5
    management: http://127.0.0.1:8765
    inference: http://127.0.0.1:8765/inference
    $ gpucloud-nb sandbox status          # or: start, stop, reset --yes, logs [-n N]

The actions act on the background service of the sandbox home (``--home DIR``, else
``GPUCLOUD_SANDBOX_HOME``, else the user data dir; see :mod:`gpucloud_nb.sandbox.service`), the one
``connect()`` uses. ``status`` exits with 3 when no service runs; ``reset`` without ``--yes`` is
refused. Serving with ``--home`` makes the foreground server that home's service (its state, its
own key and secret, its runtime file). Serving beyond loopback is refused without a custom key
(``GPUCLOUD_SANDBOX_API_KEY``) and inference secret. ``--bill-factor F`` bills F hours per real
hour. A class (a key per student, budgets held at launch, the teacher's view) is a gateway in
front of the sandbox, as in front of the real cloud: ``gpucloud-nb gateway --keys FILE``
(:mod:`gpucloud_nb.gateway.cli`); ``sandbox --keys`` says so in one sentence.

**Secrets never go on the command line**, where every local user reads them
(``/proc/PID/cmdline``, ``ps``): the API key and the inference secret come from
``GPUCLOUD_SANDBOX_API_KEY`` and ``GPUCLOUD_SANDBOX_INFERENCE_SECRET``, or from a file
(``--api-key-file``, ``--inference-secret-file``: its first line; a file option wins over the
variable). ``--api-key K`` and ``--inference-secret S`` are refused with one sentence saying so.
Files are read as UTF-8 with or without a byte-order mark.

The two lines come first, each flushed, so a script can read them; then uvicorn logs to stderr.
``--port 0`` picks a free port. Without a key the sandbox uses the public default key
(``gpucloud_nb.sandbox.DEFAULT_API_KEY``, no secret) and prints a ready ``curl`` line with it and
its header (``x-api-key``); a custom key or secret is never printed (the line then reads
``$GPUCLOUD_API_KEY``).
Ctrl-C or SIGTERM stops the server and exits with status 0. ``gpucloud-nb gateway`` is the
gateway's command.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from gpucloud_nb import cli_args
from gpucloud_nb.display import format_price
from gpucloud_nb.errors import GPUCloudError

__all__ = ["KEYS_MOVED", "build_parser", "main"]

SERVICE_ACTIONS = ("start", "status", "stop", "reset", "logs")
#: Each secret: its attribute, the option refused, its environment variable, what it is called.
SECRETS = (("api_key", "--api-key", "GPUCLOUD_SANDBOX_API_KEY", "API key"),
           ("inference_secret", "--inference-secret", "GPUCLOUD_SANDBOX_INFERENCE_SECRET",
            "inference secret"))
KEYS_MOVED = ("a class runs through a gateway in front of the sandbox: use `gpucloud-nb gateway "
              "--keys FILE` (KEY BUDGET NAME per line; without --upstream it fronts your sandbox).")


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
        description="Serve the sandbox cloud in the foreground until Ctrl-C or SIGTERM; or, with "
                    "an ACTION, manage the background sandbox service that connect() uses.",
    )
    sandbox.add_argument("--host", default="127.0.0.1", help="address to bind (default: %(default)s)")
    sandbox.add_argument("--port", type=cli_args.port, default=8765,
                         help="port to bind; 0 picks a free one (with --home: the home's last "
                              "port if free, else any) (default: %(default)s)")
    sandbox.add_argument("--api-key-file", metavar="FILE", default=None,
                         help="a file whose first line is the management key clients must send "
                              "(or set GPUCLOUD_SANDBOX_API_KEY; default: the public sandbox key)")
    sandbox.add_argument("--inference-secret-file", metavar="FILE", default=None,
                         help="a file whose first line is the inference secret clients must send "
                              "(or set GPUCLOUD_SANDBOX_INFERENCE_SECRET; default: the public "
                              "sandbox secret)")
    for _, option, _, _ in SECRETS:  # refused (see _secrets), so not shown in --help
        sandbox.add_argument(option, default=None, help=argparse.SUPPRESS)
    sandbox.add_argument("--state", metavar="FILE", default=None,
                         help="SQLite file that keeps resources across restarts (default: memory)")
    sandbox.add_argument("--launch-seconds", type=cli_args.seconds, default=3.0, metavar="F",
                         help="how long a new instance stays pending (default: %(default)s)")
    sandbox.add_argument("--cold-start-seconds", type=cli_args.seconds, default=3.0, metavar="F",
                         help="how long a request waits for an inference instance scaled to "
                              "zero to start a container (default: %(default)s)")
    sandbox.add_argument("--delete-seconds", type=cli_args.seconds, default=1.0, metavar="F",
                         help="how long a deleted instance stays deleting (default: %(default)s)")
    sandbox.add_argument("--latency", type=cli_args.seconds, default=0.0, metavar="F",
                         help="seconds added to every management request (default: %(default)s)")
    sandbox.add_argument("--upstream", metavar="URL", default=None,
                         help="a chat-completion server the inference endpoint forwards to")
    sandbox.add_argument("--inference-rate-limit", type=cli_args.positive, default=None, metavar="F",
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
    sandbox.add_argument("action", nargs="?", choices=SERVICE_ACTIONS, metavar="ACTION",
                         help="act on the background service of the sandbox home instead of "
                              "serving: start, status, stop, reset (with --yes) or logs")
    sandbox.add_argument("--home", metavar="DIR", default=None,
                         help="the sandbox home (default: GPUCLOUD_SANDBOX_HOME or the user data "
                              "dir); serving with --home makes this the home's service")
    sandbox.add_argument("--keys", default=None, help=argparse.SUPPRESS)  # see KEYS_MOVED
    sandbox.add_argument("--bill-factor", type=cli_args.positive, default=1.0, metavar="F",
                         help="hours billed per real hour, to rehearse budgets quickly "
                              "(default: %(default)s)")
    sandbox.add_argument("--yes", action="store_true", help="confirm `reset`")
    sandbox.add_argument("-n", "--lines", type=_count, default=20, metavar="N",
                         help="how many lines `logs` shows (default: %(default)s)")
    sandbox.set_defaults(handler=_run_sandbox)
    from gpucloud_nb.gateway.cli import add_parser

    add_parser(commands)
    return parser


def _read_secret(path: str, option: str, what: str) -> str:
    """The first non-blank line of the file ``path`` (``option``), stripped; raises ValueError
    with the sentence to print."""
    try:
        with open(path, encoding="utf-8-sig") as file:
            text = file.read(65536)
    except OSError as error:
        raise ValueError(f"{option}: {error.strerror or error}: {path}.") from None
    except UnicodeDecodeError:
        raise ValueError(f"{option}: the file {path} is not UTF-8 text.") from None
    for line in text.splitlines():
        if line.strip():
            return line.strip()
    raise ValueError(f"{option}: the file {path} holds no {what}.")


def _secrets(args: argparse.Namespace) -> str | None:
    """Fill ``args.api_key`` and ``inference_secret`` from their files or
    environment variables; the sentence to print when one was given on the command line or
    its file cannot be read, else ``None``."""
    for attribute, option, variable, what in SECRETS:
        if getattr(args, attribute) is not None:
            return (f"{option} would show the {what} to every user of this machine (in the "
                    f"process list); set {variable} or give {option}-file FILE instead.")
        path = getattr(args, f"{attribute}_file")
        try:
            value = (_read_secret(path, f"{option}-file", what) if path is not None
                     else os.environ.get(variable) or None)
        except ValueError as error:
            return str(error)
        setattr(args, attribute, value)
    return None


def _run_sandbox(args: argparse.Namespace) -> int:
    from gpucloud_nb.sandbox import DEFAULT_API_KEY, DEFAULT_INFERENCE_SECRET, SandboxConfig
    from gpucloud_nb.sandbox.server import serve

    refused = f"--keys: {KEYS_MOVED}" if args.keys is not None else _secrets(args)
    if refused is not None:
        print(f"gpucloud-nb sandbox: error: {refused}", file=sys.stderr)
        return 2
    if args.action is not None:
        return _service_action(args)
    if args.yes:
        print("gpucloud-nb sandbox: error: --yes goes with `reset` only.", file=sys.stderr)
        return 2
    home = None
    if args.home is not None:
        from gpucloud_nb.sandbox.home import checked_home
        from gpucloud_nb.sandbox.service import STATE_FILE, credentials

        try:
            home = checked_home(args.home)
            own_key, own_secret = credentials(home)
        except GPUCloudError as error:
            print(f"gpucloud-nb sandbox: error: {error}", file=sys.stderr)
            return 1
        except OSError as error:  # a full disk, a read-only home
            print(f"gpucloud-nb sandbox: error: cannot write in the sandbox home {args.home}: "
                  f"{error.strerror or error}.", file=sys.stderr)
            return 1
        args.api_key = args.api_key or own_key
        args.inference_secret = args.inference_secret or own_secret
        args.state = args.state or str(home / STATE_FILE)
    port = args.port

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
            port=port,
            api_key=args.api_key if args.api_key is not None else DEFAULT_API_KEY,
            home=home,
            inference_secret=(args.inference_secret if args.inference_secret is not None
                              else DEFAULT_INFERENCE_SECRET),
            state=args.state,
            launch_seconds=args.launch_seconds,
            delete_seconds=args.delete_seconds,
            cold_start_seconds=args.cold_start_seconds,
            latency=args.latency,
            upstream=args.upstream,
            inference_rate_limit=args.inference_rate_limit,
            offers=offers,
            faults=faults,
            allow_url_fetch=args.allow_url_fetch,
            bill_factor=args.bill_factor,
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
        key = config.api_key if config.api_key == DEFAULT_API_KEY else "$GPUCLOUD_API_KEY"
        print(f"try: curl -H 'x-api-key: {key}' {management}/gpu-cloud/instances/offers",
              file=sys.stderr, flush=True)

    try:
        if home is not None:
            from gpucloud_nb.sandbox.server import serve_home

            serve_home(config, home, ready)
        else:
            serve(config, ready)
    except ValueError as error:  # the --state file is refused (StateFileError): one line
        print(f"gpucloud-nb sandbox: error: --state: {error}", file=sys.stderr)
        return 2
    except OSError as error:
        print(f"gpucloud-nb sandbox: error: cannot serve on {args.host}:{port}: "
              f"{error.strerror or error}", file=sys.stderr)
        return 1
    except GPUCloudError as error:
        print(f"gpucloud-nb sandbox: error: {error}", file=sys.stderr)
        return 1
    return 0


def _service_action(args: argparse.Namespace) -> int:
    """``start``, ``status``, ``stop``, ``reset --yes`` and ``logs`` of the home's service."""
    from gpucloud_nb.sandbox import service
    from gpucloud_nb.sandbox.home import default_home

    home = Path(args.home) if args.home is not None else default_home()
    if args.action == "reset" and not args.yes:
        print(f"gpucloud-nb sandbox: reset deletes every instance, volume and timer in {home}; "
              "run `gpucloud-nb sandbox reset --yes` to do it.", file=sys.stderr)
        return 2
    if args.action == "logs":
        lines = service.log_tail(home, args.lines)
        print("\n".join(lines) if lines else f"No sandbox log in {home} yet.")
        return 0
    try:
        return _act(args.action, home, args.launch_seconds)
    except GPUCloudError as error:
        print(f"gpucloud-nb sandbox: error: {error}", file=sys.stderr)
        return 1
    except OSError as error:
        print(f"gpucloud-nb sandbox: error: {args.action} failed in {home}: "
              f"{error.strerror or error}.", file=sys.stderr)
        return 1


def _act(action: str, home: Path, launch_seconds: float) -> int:
    """``start``, ``status``, ``stop`` or ``reset --yes``; raises ``GPUCloudError``/``OSError``."""
    from gpucloud_nb.sandbox import service
    from gpucloud_nb.sandbox.machines import remove_machines

    if action == "start":
        runtime = service.find_or_start(home, launch_seconds=launch_seconds)
        print(f"management: {runtime.management_url}")
        print(f"inference: {runtime.inference_url}")
        return 0
    if action == "status":
        return _status(home)
    if action == "stop":
        pid = service.stop(home)
        print(f"Stopped the sandbox service (pid {pid}); its state stays in {home}."
              if pid is not None else f"No sandbox service is running in {home}.")
        return 0
    before = service.find(home)  # reset --yes: restarted as it was
    pid = service.stop(home)
    for suffix in ("", "-wal", "-shm"):
        (home / f"{service.STATE_FILE}{suffix}").unlink(missing_ok=True)
    remove_machines(home)  # the instances' homes and the volumes' files go with them
    if pid is None:
        print(f"Emptied the sandbox state in {home}.")
        return 0
    again = service.find_or_start(
        home, launch_seconds=before.launch_seconds if before else None,
        api_key=before.api_key if before else None,
        inference_secret=before.inference_secret if before else None)
    print(f"Emptied the sandbox state in {home}; the service runs again at "
          f"{again.management_url}.")
    return 0


def _status(home: Path) -> int:
    import httpx

    from gpucloud_nb.sandbox import service

    runtime = service.find(home)
    if runtime is None:
        pid = service.running_pid(home)
        if pid is None:
            print(f"No sandbox service is running in {home}.")
            return 3
        print(f"gpucloud-nb sandbox: error: a sandbox service runs in {home} (pid {pid}) but "
              f"cannot be verified (its runtime file {home / service.RUNTIME_FILE} is missing or "
              "unreadable, or it does not answer); `gpucloud-nb sandbox stop` stops it.",
              file=sys.stderr)
        return 1
    try:
        response = httpx.get(f"{runtime.management_url}/sandbox/status", timeout=10,
                             headers={"x-api-key": runtime.api_key}, trust_env=False)
        status = response.json()
    except (httpx.HTTPError, ValueError) as error:
        reason = type(error).__name__ if isinstance(error, httpx.HTTPError) else "not JSON"
        print(f"gpucloud-nb sandbox: error: the service did not report its status ({reason}).",
              file=sys.stderr)
        return 1
    if response.status_code != 200 or not isinstance(status, dict):
        what = f"HTTP {response.status_code}" if response.status_code != 200 \
            else "its answer is JSON but not an object"
        print(f"gpucloud-nb sandbox: error: the service did not report its status ({what}).",
              file=sys.stderr)
        return 1
    up = int(time.time() - runtime.started_at)
    counts = status.get("instances")
    counts = counts if isinstance(counts, dict) else {}
    shown = ", ".join(f"{n} {name}" for name, n in sorted(counts.items())) or "none"
    spend = status.get("spend")
    print(f"sandbox service: running at {runtime.management_url} (pid {runtime.pid}), "
          f"up {up // 3600}:{up // 60 % 60:02d}:{up % 60:02d}")
    print(f"inference: {runtime.inference_url}")
    print(f"home: {home}")
    print(f"instances: {shown}")
    print(f"volumes: {status.get('volumes', 0)}")
    print(f"spend so far: {format_price(float(spend) if isinstance(spend, (int, float)) else 0.0)}")
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
