"""The user's personal gateway: one per cloud and key, in the background, found or started by
``connect()`` as the sandbox service is.

    >>> from gpucloud_nb.gateway import personal
    >>> runtime = personal.find_or_start("https://cloud.example", upstream_key)  # doctest: +SKIP
    >>> runtime.management_url, runtime.api_key  # doctest: +SKIP
    ('http://127.0.0.1:41911', 'gk-…')

With ``GPUCLOUD_API_KEY`` set, ``connect()`` does not talk to the cloud itself: it talks to this
gateway, which holds the money rules (timers, budgets) for the user whether or not a kernel runs,
and forwards everything else to the cloud with the user's key (:mod:`gpucloud_nb.gateway`).
``GPUCLOUD_GATEWAY=off`` talks to the cloud directly; no gateway then watches money. Without a
key, ``connect()`` puts one in front of the user's sandbox service in the same way (its home
:func:`sandbox_home`; it ends when the sandbox process does, ``--upstream-pid``).

Each cloud and key has a home of its own, ``<root>/<16 hex digits of a digest of the base URL
and the key>``; the root is ``GPUCLOUD_GATEWAY_HOME``, else the user data dir's ``gateways``. A
home (0700, refused when another user could write in it) holds:

- ``service.json`` (0600): the gateway's own local key (``gk-…``, random, made once: the one
  person of this gateway, the key the client sends; never the cloud's key), its challenge
  secret and the last port;
- ``runtime.json`` (0600): URL, pid, local key, the cloud's URL, start time; written once the
  gateway listens, removed when it stops cleanly;
- ``gateway.sqlite3`` (the gateway's state), ``gateway.log``, ``start.lock`` and
  ``service.lock`` (as the sandbox service's: :mod:`gpucloud_nb.sandbox.service`).

The cloud's key reaches the gateway only through its environment (``GPUCLOUD_UPSTREAM_API_KEY``),
never its command line, a file or a client. A running gateway is verified before the local key is
sent to it, exactly as the sandbox service is (its pid is ours and holds ``service.lock``, and it
answers ``GET /gateway/challenge?nonce=N`` with the HMAC of the home's challenge secret); anything
else is stale and replaced.

Choices where the issue is silent: the one person has no budget (the gateway still keeps
``delete_after`` and ``budget=`` of each create) and owns the whole account: lists are not
filtered, and an instance or volume made elsewhere (the web console, ``GPUCLOUD_GATEWAY=off``)
is adopted when first listed or read, so its timers and budgets can be set through the gateway.
This module imports no web framework.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import secrets
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

from gpucloud_nb._secrets import mask
from gpucloud_nb.errors import ConnectionFailedError
from gpucloud_nb.gateway.config import UPSTREAM_KEY_VARIABLE
from gpucloud_nb.sandbox import service
from gpucloud_nb.sandbox.home import checked_home

__all__ = [
    "CHALLENGE_PATH",
    "HOME_VARIABLE",
    "LOG_FILE",
    "OFF_VARIABLE",
    "GatewayRuntime",
    "find",
    "find_or_start",
    "home_for",
    "homes",
    "local_key",
    "off",
    "read_runtime",
    "root",
    "sandbox_home",
    "stop",
]

HOME_VARIABLE = "GPUCLOUD_GATEWAY_HOME"
OFF_VARIABLE = "GPUCLOUD_GATEWAY"
CHALLENGE_PATH = "/gateway/challenge"
LOG_FILE = "gateway.log"
START_TIMEOUT = 30.0


@dataclass(frozen=True)
class GatewayRuntime:
    """What a personal gateway's ``runtime.json`` says; ``repr`` masks the local key."""

    management_url: str
    pid: int
    api_key: str
    upstream_url: str
    started_at: float
    home: str
    #: The sandbox service's pid when the upstream is one (the gateway ends with it), else 0.
    upstream_pid: int = 0

    def __repr__(self) -> str:
        return (f"GatewayRuntime({self.management_url}, pid={self.pid}, "
                f"api_key={mask(self.api_key)!r}, upstream_url={self.upstream_url!r}, "
                f"home={self.home!r})")


def off() -> bool:
    """True when ``GPUCLOUD_GATEWAY=off``: clients talk to the cloud directly."""
    return os.environ.get(OFF_VARIABLE, "").strip().lower() in ("off", "0", "no", "false")


def root() -> Path:
    """Where personal gateways keep their homes: ``GPUCLOUD_GATEWAY_HOME``, else the user data
    dir's ``gateways``."""
    configured = os.environ.get(HOME_VARIABLE)
    if configured:
        return Path(configured).expanduser()
    import platformdirs

    return Path(platformdirs.user_data_dir("gpucloud-nb", appauthor=False)) / "gateways"


def home_for(upstream_url: str, upstream_key: str) -> Path:
    """The home of the personal gateway for this cloud and key (named by a digest, never the key).

        >>> home_for("https://cloud.example", "sk-0123456789").name
        'd4c4898a7e3e61c6'
    """
    digest = hashlib.sha256(f"{upstream_url.rstrip('/')}\n{upstream_key}".encode()).hexdigest()
    return root() / digest[:16]


def homes() -> list[Path]:
    """Every personal gateway home under :func:`root` (running or not)."""
    try:
        return sorted(path for path in root().iterdir()
                      if path.is_dir() and (path / service.SETTINGS_FILE).exists())
    except OSError:
        return []


def local_key(home: Path) -> str:
    """The gateway's own key for its one person, made (random) with its challenge secret on
    first use; it is what the client sends, and it is worth nothing without this machine."""
    settings = service.read_json(home / service.SETTINGS_FILE) or {}
    key = settings.get("api_key")
    made: dict[str, str] = {}
    if not (isinstance(key, str) and len(key) >= 16):
        key = made["api_key"] = f"gk-{secrets.token_urlsafe(24)}"
    if not isinstance(settings.get("challenge"), str):
        made["challenge"] = secrets.token_hex(32)
    if made:
        service.write_private(home / service.SETTINGS_FILE, settings | made)
    return key


def read_runtime(home: Path) -> GatewayRuntime | None:
    """The runtime file of ``home`` as written, or ``None``; not checked."""
    data = service.read_json(home / service.RUNTIME_FILE)
    if data is None:
        return None
    try:
        return GatewayRuntime(**{name: data[name] for name in GatewayRuntime.__dataclass_fields__
                                 if name in data})
    except (KeyError, TypeError):
        return None


def write_runtime(home: Path, runtime: GatewayRuntime) -> None:
    """Write the runtime file (mode 0600)."""
    service.write_private(home / service.RUNTIME_FILE, asdict(runtime))


def remove_runtime(home: Path, pid: int) -> None:
    """Remove the runtime file if it is still that of ``pid``."""
    runtime = read_runtime(home)
    if runtime is not None and runtime.pid == pid:
        with contextlib.suppress(OSError):
            (home / service.RUNTIME_FILE).unlink()


def _verified(runtime: GatewayRuntime | None, home: Path) -> GatewayRuntime | None:
    if runtime is None or not service.verified(runtime, home, path=CHALLENGE_PATH):
        return None
    return runtime


def find(home: Path) -> GatewayRuntime | None:
    """The running gateway of ``home``, verified; ``None`` if none is."""
    home = checked_home(home, create=False)
    return _verified(read_runtime(home), home)


def sandbox_home(sandbox_home: str | os.PathLike[str], upstream_key: str) -> Path:
    """The home of the personal gateway in front of the sandbox service of ``sandbox_home``:
    named by that home and the sandbox's key, not its URL, so that a sandbox restarted on
    another port keeps its gateway's state (timers, idle clocks, budgets).

        >>> sandbox_home("/tmp/box", "sk-0").parent == root()
        True
    """
    return home_for(f"sandbox:{Path(sandbox_home).resolve()}", upstream_key)


def find_or_start(upstream_url: str, upstream_key: str, *, home: Path | None = None,
                  upstream_pid: int = 0, timeout: float = START_TIMEOUT) -> GatewayRuntime:
    """The user's running gateway for this cloud and key, or a freshly started one.

    ``home`` is :func:`home_for` the cloud and key unless given (:func:`sandbox_home` for the
    sandbox service, whose pid is ``upstream_pid``: the gateway ends when that process does, so
    it never sends the sandbox's key to whatever takes its port next). A gateway of that home
    whose upstream has moved (a sandbox restarted) is stopped and started again in front of the
    new one, its state kept. Finding and
    starting happen under the home's ``start.lock``, so concurrent callers (two kernels) end on
    one gateway. A home another user could write in, or one that cannot be written, is a
    :class:`ConnectionFailedError` of one sentence.
    """
    upstream_url = upstream_url.rstrip("/")

    def current() -> GatewayRuntime | None:
        found = find(checked)
        return found if found is not None and same(found) else None

    def same(found: GatewayRuntime) -> bool:
        return found.upstream_url == upstream_url and found.upstream_pid == upstream_pid

    try:
        checked = checked_home(home if home is not None else home_for(upstream_url, upstream_key))
        found = find(checked)
        if found is not None and same(found):
            return found
        if found is not None:
            stop(checked)  # its upstream moved: the same state, served in front of the new one
        return service.find_or_start_locked(
            checked, current,
            lambda: _start(checked, upstream_url, upstream_key, upstream_pid, timeout),
            timeout=timeout, what="personal gateway", command="gpucloud-nb gateway")
    except OSError as error:
        reason = error.strerror.lower() if error.strerror else str(error)
        raise ConnectionFailedError(
            f"Your personal gateway cannot start: writing in its home failed ({reason}); set "
            f"{HOME_VARIABLE} to a writable directory, or {OFF_VARIABLE}=off to talk to the "
            "cloud directly.") from None


def _start(home: Path, upstream_url: str, upstream_key: str, upstream_pid: int,
           timeout: float) -> GatewayRuntime:
    """Start the gateway of ``home`` detached; the cloud's key through its environment only."""
    local_key(home)
    env = {key: value for key, value in os.environ.items()
           if key not in ("GPUCLOUD_API_KEY", UPSTREAM_KEY_VARIABLE)}
    env[UPSTREAM_KEY_VARIABLE] = upstream_key
    command = [sys.executable, "-m", "gpucloud_nb", "gateway", "--personal", "--home", str(home),
               "--upstream", upstream_url, "--port", "0"]
    if upstream_pid:
        command += ["--upstream-pid", str(upstream_pid)]

    def ready(pid: int) -> GatewayRuntime | None:
        runtime = read_runtime(home)
        return _verified(runtime, home) if runtime is not None and runtime.pid == pid else None

    return service.spawn(home, command, env, ready, timeout=timeout,
                         what="Your personal gateway", log_file=LOG_FILE)


def stop(home: Path) -> int | None:
    """Stop the gateway of ``home`` (SIGTERM; its state stays); its pid, or ``None``."""
    home = checked_home(home, create=False)
    pid = service.running_pid(home)
    if pid is None:
        return None
    if not service.terminate(pid, home):
        raise ConnectionFailedError(f"The personal gateway (pid {pid}) did not stop; kill it "
                                    "by hand.")
    remove_runtime(home, pid)
    return pid

