"""The ``gpucloud-nb gateway`` command: serve a class gateway, or make a keys-file line.

    $ export GPUCLOUD_UPSTREAM_API_KEY=...            # the cloud's key: never on a command line
    $ gpucloud-nb gateway --keys class.keys --upstream https://cloud.example --port 8790
    management: http://127.0.0.1:8790
    $ gpucloud-nb gateway keys new "Ada Lovelace" --budget 20/day >> class.keys
    $ gpucloud-nb gateway class            # the teacher's table (see gateway/class_table.py)
    $ gpucloud-nb gateway status           # your personal gateways (connect() starts them)
    $ gpucloud-nb gateway stop

``--personal --home DIR --upstream URL`` is how ``connect()`` starts the user's personal gateway
(:mod:`gpucloud_nb.gateway.personal`); ``status`` lists the personal gateways and ``stop`` stops
them (their state stays; the next ``connect()`` starts them again).

Without ``--upstream`` the upstream is the user's own sandbox service, found or started as
``connect()`` does (its key then comes from the service unless ``GPUCLOUD_UPSTREAM_API_KEY`` is
set). ``--home DIR`` keeps the state file (default: the user data dir's ``gateway``);
``--reserve-hours H`` is the admission window (1). ``--jupyterhub`` serves a JupyterHub's users
instead of a keys file (:mod:`gpucloud_nb.gateway.hub_cli`). The ``management:`` line comes first, flushed,
so a script can read it; serving beyond loopback warns that keys then travel without TLS unless a
TLS proxy is in front. A malformed keys file is one sentence naming the line, exit status 2, and
nothing is served. Ctrl-C or SIGTERM stops the gateway with status 0.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from gpucloud_nb import cli_args

__all__ = ["TLS_WARNING", "add_parser", "run", "tls_warning"]

TLS_WARNING = ("gpucloud-nb gateway: warning: serving beyond loopback without TLS; students' keys "
               "travel in clear unless a TLS proxy is in front of the gateway.")


def tls_warning(host: str) -> str | None:
    """The warning to print when serving on ``host``: :data:`TLS_WARNING` beyond loopback.

        >>> tls_warning("127.0.0.1") is None, tls_warning("0.0.0.0") == TLS_WARNING
        (True, True)
    """
    from gpucloud_nb.sandbox.config import is_loopback

    return None if is_loopback(host) else TLS_WARNING


def add_parser(commands: Any) -> None:
    """Add ``gateway`` to the ``gpucloud-nb`` subcommands ``commands``."""
    gateway = commands.add_parser(
        "gateway", help="serve a class gateway in front of a cloud (keys, budgets, teacher view)",
        description="Serve the cloud's interface to each person's key in front of an upstream "
                    "cloud, holding budgets at launch; or `keys new NAME` to print a keys line.")
    gateway.add_argument("words", nargs="*", metavar="keys new NAME | class",
                         help="print a fresh keys-file line for NAME, or the class table (the "
                              "teacher's key from GPUCLOUD_API_KEY or --key-file), instead of "
                              "serving")
    gateway.add_argument("--keys", metavar="FILE", default=None,
                         help="the keys file: 'KEY BUDGET NAME' or 'KEY teacher NAME' per line")
    gateway.add_argument("--budget", default="-",
                         help="with `keys new`: dollars, '-', 'N/day' or 'N/week' (default: -)")
    gateway.add_argument("--upstream", metavar="URL", default=None,
                         help="the upstream cloud's base URL (default: your sandbox service); "
                              "its key comes from GPUCLOUD_UPSTREAM_API_KEY")
    gateway.add_argument("--host", default="127.0.0.1", help="address to bind (default: %(default)s)")
    gateway.add_argument("--port", type=cli_args.port, default=8790,
                         help="port to bind; 0 picks a free one (default: %(default)s)")
    gateway.add_argument("--home", metavar="DIR", default=None,
                         help="directory of the gateway's state (default: the user data dir)")
    gateway.add_argument("--reserve-hours", type=cli_args.hours, default=1.0, metavar="H",
                         help="hours of every running instance a budget must hold at each create "
                              "(default: %(default)s)")
    gateway.add_argument("--url", default=None,
                         help="with `class`: the gateway's URL (default: GPUCLOUD_BASE_URL)")
    gateway.add_argument("--key-file", metavar="FILE", default=None,
                         help="with `class`: a file holding the teacher's key (default: "
                              "GPUCLOUD_API_KEY)")
    gateway.add_argument("--csv", action="store_true", help="with `class`: print CSV")
    from gpucloud_nb.gateway.hub_cli import add_arguments as add_hub_arguments

    add_hub_arguments(gateway)
    gateway.add_argument("--upstream-pid", type=int, default=0, metavar="PID",
                         help=argparse.SUPPRESS)  # with --personal: end when the sandbox does
    gateway.add_argument("--personal", action="store_true",
                         help="serve as the personal gateway of --home (what connect() starts: "
                              "one person, the home's own key, owning the whole account)")
    gateway.set_defaults(handler=run)


def _fail(message: str, status: int = 2) -> int:
    print(f"gpucloud-nb gateway: error: {message}", file=sys.stderr)
    return status


def run(args: argparse.Namespace) -> int:
    """Run ``gpucloud-nb gateway`` with its parsed ``args``; the exit status."""
    if args.words[:1] == ["class"]:
        from gpucloud_nb.gateway.class_table import run as class_table

        return class_table(args)
    if args.words[:1] in (["stop"], ["status"]) and len(args.words) == 1:
        return _personal_action(args.words[0])
    if args.words:
        return _new_key(args)
    if args.personal:
        return _serve_personal(args)
    from gpucloud_nb.gateway.config import UPSTREAM_KEY_VARIABLE, GatewayConfig
    from gpucloud_nb.gateway.keys import KeysFileError, read_keys
    from gpucloud_nb.gateway.server import serve

    hub: dict[str, Any] = {}
    if args.jupyterhub:
        from gpucloud_nb.gateway.hub_cli import hub_options

        try:
            hub = hub_options(args, os.environ)
        except ValueError as error:
            return _fail(f"{error}.")
        people = []
    elif args.keys is None:
        return _fail("give the keys file with --keys FILE ('KEY BUDGET NAME' per line).")
    else:
        try:
            people = read_keys(args.keys)
        except KeysFileError as error:
            return _fail(str(error))
    key = os.environ.get(UPSTREAM_KEY_VARIABLE, "")
    if args.upstream is not None:
        if not args.upstream.startswith(("http://", "https://")):
            return _fail("--upstream must be an http:// or https:// URL.")
        if not key:
            return _fail(f"set {UPSTREAM_KEY_VARIABLE} to the upstream cloud's key (it is never "
                         "given on the command line).")
        upstream = args.upstream
    else:
        from gpucloud_nb.errors import GPUCloudError
        from gpucloud_nb.sandbox import service

        try:
            runtime = service.find_or_start()
        except (GPUCloudError, OSError) as error:
            return _fail(f"cannot find or start your sandbox service: {error}", 1)
        upstream, key = runtime.management_url, key or runtime.api_key
    try:
        home = _home(args.home)
    except OSError as error:
        return _fail(f"cannot use the gateway home {args.home}: {error.strerror or error}.", 1)
    config = GatewayConfig(people=tuple(people), upstream_url=upstream, upstream_key=key,
                           **{"host": args.host, "port": args.port, **hub}, home=home,
                           reserve_hours=args.reserve_hours)

    def ready(url: str) -> None:
        print(f"management: {url}", flush=True)
        warning = tls_warning(args.host)
        if warning:
            print(warning, file=sys.stderr, flush=True)

    try:
        serve(config, ready)
    except OSError as error:
        return _fail(f"cannot serve on {config.host}:{config.port}: {error.strerror or error}", 1)
    return 0


def _home(given: str | None) -> Path:
    from gpucloud_nb.sandbox.home import private_dir

    if given is not None:
        return private_dir(given)
    import platformdirs

    return private_dir(Path(platformdirs.user_data_dir("gpucloud-nb", appauthor=False))
                       / "gateway")


def _new_key(args: argparse.Namespace) -> int:
    from gpucloud_nb.gateway.keys import new_line

    words = list(args.words)
    if len(words) < 3 or words[:2] != ["keys", "new"]:
        return _fail("the only action is `keys new NAME [--budget B]`.")
    try:
        print(new_line(" ".join(words[2:]), args.budget))
    except ValueError as error:
        return _fail(f"{error}.")
    return 0


def _serve_personal(args: argparse.Namespace) -> int:
    """``--personal``: the personal gateway of ``--home``, its one person the home's own key."""
    import getpass

    from gpucloud_nb.errors import ConnectionFailedError
    from gpucloud_nb.gateway import personal
    from gpucloud_nb.gateway.config import UPSTREAM_KEY_VARIABLE, GatewayConfig
    from gpucloud_nb.gateway.keys import Person, hash_key
    from gpucloud_nb.gateway.server import serve_home
    from gpucloud_nb.sandbox.home import checked_home

    key = os.environ.get(UPSTREAM_KEY_VARIABLE, "")
    if args.home is None or args.upstream is None or not key:
        return _fail(f"--personal needs --home, --upstream and {UPSTREAM_KEY_VARIABLE}.")
    if not args.upstream.startswith(("http://", "https://")):
        return _fail("--upstream must be an http:// or https:// URL.")
    try:
        home = checked_home(args.home)
        local = personal.local_key(home)
    except (ConnectionFailedError, OSError) as error:
        return _fail(str(error), 1)
    try:
        name = getpass.getuser()
    except (KeyError, OSError):  # no name for this uid
        name = "you"
    people = (Person(hash_key(local), name, None, "", False),)
    config = GatewayConfig(people=people, upstream_url=args.upstream.rstrip("/"),
                           upstream_key=key, host=args.host, port=args.port, home=home,
                           reserve_hours=args.reserve_hours, personal=True)
    try:
        serve_home(config, home, lambda url: print(f"management: {url}", flush=True),
                   upstream_pid=args.upstream_pid)
    except (ConnectionFailedError, OSError) as error:
        return _fail(str(error), 1)
    return 0


def _personal_action(action: str) -> int:
    """``status`` or ``stop`` of every personal gateway (see :mod:`gpucloud_nb.gateway.personal`)."""
    from gpucloud_nb.errors import ConnectionFailedError
    from gpucloud_nb.gateway import personal

    found = 0
    for home in personal.homes():
        try:
            if action == "stop":
                pid = personal.stop(home)
                if pid is not None:
                    found += 1
                    print(f"Stopped the personal gateway (pid {pid}) in {home}.")
                continue
            runtime = personal.find(home)
        except ConnectionFailedError as error:
            return _fail(str(error), 1)
        if runtime is not None:
            found += 1
            print(f"personal gateway: running at {runtime.management_url} (pid {runtime.pid}) "
                  f"for {runtime.upstream_url}; home {home}")
    if not found:
        print(f"No personal gateway is running in {personal.root()}.")
        return 3 if action == "status" else 0
    return 0
