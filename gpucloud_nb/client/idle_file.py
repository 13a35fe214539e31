"""The real cloud's idle limits file and JupyterLab's heartbeat: per account, private, never stuck.

    >>> url = "https://cloud.example"
    >>> limits = IdleLimits(url, account(url, "key"))  # doctest: +SKIP
    >>> limits.set("i-1", 1800.0)  # doctest: +SKIP
    >>> limits.limits()  # doctest: +SKIP
    {'i-1': {'seconds': 1800.0, 'keptAt': 1795608000.1}}

Both live in ``platformdirs.user_cache_dir("gpucloud-nb")/idle``: ``<cloud>-<account>.json``
holds ``{"seconds", "keptAt"}`` per instance, ``<cloud>-<account>.lab.json`` the heartbeat of
the JupyterLab extension that watches them (``{"pid", "at", "every", "watching"}``).

Choices where the issue is silent:

- **Per account.** ``<cloud>`` is the hash of the base URL the change stamps use
  (:mod:`gpucloud_nb.client.changes`), ``<account>`` a hash of that URL and the API key
  (:func:`account`; never the key). A kernel and a JupyterLab on two keys of one cloud never
  share a file, so neither counts on a watcher that cannot see its instances.
- **The heartbeat names what it watches.** ``watching`` lists the instances JupyterLab really
  watches (limits of its file that its own list shows pending or active); a kernel stands aside
  for those only, and only while the beat is fresh (:data:`STALE_POLLS` of its poll intervals).
- **Private.** The folder is made 0700 and every file in it 0600. A folder of ours that others
  can read or write is repaired (``chmod 700``), and a file in it that another user owns is
  removed, as is never read; a folder of another user's is refused with one sentence. Nobody else
  can then open the lock file, so nobody else can hold its ``flock``.
- **Never stuck.** A change takes an exclusive ``flock`` on ``<file>.lock``, waiting at most
  ``LOCK_WAIT`` seconds (10) and then failing with one sentence; ``wait=0`` never waits. Only
  this user's processes can hold the lock (the file is private), each for a few milliseconds,
  so the wait is generous: two kernels writing at once on a loaded machine (load 10 on 2
  cores) waited past 2 s. No wait happens on an event loop or after a create (``wait=0``).
- **One bad entry is one entry.** The file is split into its top-level entries without parsing
  their values, and each entry is read alone: one that is not ``{"seconds": positive finite,
  "keptAt": finite}`` (a huge integer, deep nesting, text) is skipped and logged once; the
  next write leaves it out.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import math
import os
import re
import stat
import threading
import time
from collections.abc import Collection, Iterator
from pathlib import Path

from gpucloud_nb.client import changes
from gpucloud_nb.errors import GPUCloudError, InvalidInputError

try:
    import fcntl
except ImportError:  # Windows: threads of one process are still serialised
    fcntl = None  # type: ignore[assignment]

__all__ = ["LOCK_WAIT", "STALE_POLLS", "IdleLimits", "LockedError", "account", "entries"]

log = logging.getLogger("gpucloud_nb.idle")
STALE_POLLS = 3.0
LOCK_WAIT = 10.0
_THREADS = threading.Lock()  # the limits files' writers of this process, one at a time
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"', re.DOTALL)
_POSIX = os.name == "posix"


class LockedError(GPUCloudError):
    """The limits file stayed locked by another process (of this user) for the time allowed."""


def account(base_url: str, api_key: str) -> str:
    """A name for the account of ``api_key`` at ``base_url``: a hash, never the key.

        >>> account("http://127.0.0.1:9", "a") == account("http://127.0.0.1:9/", "a")
        True
        >>> account("http://127.0.0.1:9", "a") == account("http://127.0.0.1:9", "b")
        False
    """
    cloud = changes.path(base_url).name
    return hashlib.sha256(f"gpucloud-nb account\0{cloud}\0{api_key}".encode()).hexdigest()[:16]


def entries(text: str) -> Iterator[tuple[str, str]]:
    """The top-level ``(key, value text)`` pairs of a JSON object, values left unparsed (so
    nesting costs no recursion); stops at the first thing that is not one.

        >>> list(entries('{"a": {"x": [1, "]"]}, "b": 2}'))
        [('a', '{"x": [1, "]"]}'), ('b', '2')]
    """
    at = _skip(text, 0)
    if not text.startswith("{", at):
        return
    at += 1
    while True:
        at = _skip(text, at)
        key = _STRING.match(text, at)
        if key is None:
            return
        at = _skip(text, key.end())
        if not text.startswith(":", at):
            return
        start = at = _skip(text, at + 1)
        depth = 0
        while at < len(text):
            char = text[at]
            if char == '"':
                string = _STRING.match(text, at)
                if string is None:
                    return
                at = string.end()
                continue
            if char in "[{":
                depth += 1
            elif char in "]}":
                if depth == 0:
                    break
                depth -= 1
            elif char == "," and depth == 0:
                break
            at += 1
        try:
            name = json.loads(key.group())
        except ValueError:
            return
        yield name, text[start:at].strip()
        if not text.startswith(",", at):
            return
        at += 1


def _skip(text: str, at: int) -> int:
    while at < len(text) and text[at] in " \t\r\n":
        at += 1
    return at


def _entry(value: str) -> dict[str, float]:
    """One limit read alone; raises (anything) when it is not one."""
    data = json.loads(value)
    seconds, kept = float(data["seconds"]), float(data.get("keptAt") or 0.0)
    if not (math.isfinite(seconds) and seconds > 0 and math.isfinite(kept)):
        raise ValueError("not a positive finite limit")
    return {"seconds": seconds, "keptAt": kept}


def _private_folder(folder: Path) -> Path:
    """``folder`` made (0700) or repaired; one sentence when it is another user's or unusable."""
    try:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        info = folder.lstat()
    except OSError as error:
        raise GPUCloudError(f"The idle limits folder {folder} cannot be made "
                            f"({error.strerror or error}).") from None
    if not stat.S_ISDIR(info.st_mode):
        raise GPUCloudError(f"The idle limits folder {folder} is not a folder; remove it.")
    if _POSIX and info.st_uid != os.getuid():
        raise GPUCloudError(f"The idle limits folder {folder} belongs to another user (uid "
                            f"{info.st_uid}); remove it or set XDG_CACHE_HOME to a folder of your "
                            "own.")
    if _POSIX and info.st_mode & 0o077:  # ours, but others could read or write it: repair
        try:
            folder.chmod(0o700)
            for file in folder.iterdir():
                if file.lstat().st_uid != os.getuid() or file.is_symlink():
                    file.unlink()  # planted by another user while the folder was open
        except OSError as error:
            raise GPUCloudError(f"The idle limits folder {folder} is open to other users and "
                                f"could not be made private ({error.strerror or error}).") from None
    return folder


def _open_own(path: Path, flags: int) -> int:
    """A descriptor of ``path`` (0600, never through a symlink), only if this user owns it."""
    fd = os.open(path, flags | getattr(os, "O_NOFOLLOW", 0), 0o600)
    try:
        info = os.fstat(fd)
        if _POSIX and info.st_uid != os.getuid():
            raise PermissionError(f"{path.name} belongs to another user")
        if _POSIX and info.st_mode & 0o077:
            os.fchmod(fd, 0o600)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _read_own(path: Path) -> str:
    fd = _open_own(path, os.O_RDONLY)
    with os.fdopen(fd, encoding="utf-8") as file:
        return file.read()


def _write_json(path: Path, data: object) -> None:
    part = path.with_name(f"{path.name}.{os.getpid()}.{threading.get_ident()}.part")
    with contextlib.suppress(FileNotFoundError):
        part.unlink()
    fd = _open_own(part, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as file:
            file.write(json.dumps(data))
        os.replace(part, path)
    except BaseException:
        with contextlib.suppress(OSError):
            part.unlink()
        raise


def _sentence(error: OSError, path: Path) -> GPUCloudError:
    return GPUCloudError(f"The idle limits file {path} could not be written "
                         f"({error.strerror or error}).")


class IdleLimits:
    """The idle limits of one account of one cloud (see the module docstring).

    Each entry is ``{"seconds": limit, "keptAt": Unix time of the last Keep}``.
    """

    def __init__(self, base_url: str, account: str) -> None:
        stamp = changes.path(base_url)
        self.path = stamp.parent.parent / "idle" / f"{stamp.name}-{account}.json"
        self.heartbeat_path = self.path.with_suffix(".lab.json")
        self._skipped: set[str] = set()

    # -- reading ---------------------------------------------------------------------------
    def limits(self) -> dict[str, dict[str, float]]:
        """Instance id → ``{"seconds", "keptAt"}``; ``{}`` when the file is missing, unreadable
        or another user's; a bad entry is skipped (and logged once)."""
        try:
            text = _read_own(self.path)
        except (OSError, ValueError):
            return {}
        found = {}
        for key, value in entries(text):
            try:
                found[key] = _entry(value)
            except Exception as error:  # overflow, recursion, shape: skip it
                if key not in self._skipped:
                    self._skipped.add(key)
                    log.warning("The idle limit of %r in %s was skipped: it is not a limit (%s).",
                                key[:40], self.path, type(error).__name__)
        return found

    def lab_watches(self) -> set[str]:
        """The instances a fresh JupyterLab heartbeat says it watches (empty when stale)."""
        try:
            beat = json.loads(_read_own(self.heartbeat_path))
            at, every = float(beat["at"]), float(beat["every"])
            watching = {str(i) for i in beat.get("watching") or () if isinstance(i, str)}
        except (OSError, ValueError, KeyError, TypeError, AttributeError, RecursionError):
            return set()
        return watching if 0 <= time.time() - at <= STALE_POLLS * every else set()

    # -- writing ---------------------------------------------------------------------------
    def check(self) -> None:
        """Raise one sentence unless the folder is private and a file can be written in it
        (called before a create, so that what can fail fails before anything is billed)."""
        _private_folder(self.path.parent)
        probe = self.path.with_name(f"{self.path.name}.{os.getpid()}.probe")
        try:
            _write_json(probe, {})
            probe.unlink()
        except OSError as error:
            raise _sentence(error, self.path) from None

    def beat(self, every: float, watching: Collection[str]) -> None:
        """JupyterLab's heartbeat: it polls every ``every`` seconds and watches ``watching``;
        never raises."""
        with contextlib.suppress(OSError, GPUCloudError):
            _private_folder(self.path.parent)
            _write_json(self.heartbeat_path, {"pid": os.getpid(), "at": time.time(),
                                              "every": float(every), "watching": sorted(watching)})

    @contextlib.contextmanager
    def _changing(self, wait: float) -> Iterator[dict[str, dict[str, float]]]:
        """The limits to change, written back at the end; one process and thread at a time
        (an exclusive ``flock`` on ``<file>.lock``), waiting at most ``wait`` seconds."""
        _private_folder(self.path.parent)
        deadline = time.monotonic() + wait
        acquired = _THREADS.acquire(timeout=wait) if wait > 0 else _THREADS.acquire(blocking=False)
        if not acquired:
            raise self._busy(wait)
        try:
            fd = _open_own(self.path.with_name(self.path.name + ".lock"), os.O_RDWR | os.O_CREAT)
            try:
                while fcntl is not None:
                    try:
                        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                        break
                    except BlockingIOError:
                        if time.monotonic() >= deadline:
                            raise self._busy(wait) from None
                        time.sleep(0.02)
                limits = self.limits()
                yield limits
                _write_json(self.path, limits)
            finally:
                os.close(fd)  # releases the flock
        except OSError as error:
            raise _sentence(error, self.path) from None
        finally:
            _THREADS.release()

    def _busy(self, wait: float) -> LockedError:
        return LockedError(f"The idle limits file {self.path} stayed locked by another process "
                             f"for {wait:g} s; try again.")

    def set(self, instance_id: str, seconds: float, *, kept_at: float | None = None,
            wait: float = LOCK_WAIT) -> None:
        """Limit ``instance_id`` to ``seconds`` idle; its clock starts at ``kept_at`` (now)."""
        with self._changing(wait) as limits:
            limits[instance_id] = {"seconds": seconds,
                                   "keptAt": time.time() if kept_at is None else kept_at}

    def drop(self, instance_id: str, *, wait: float = LOCK_WAIT) -> bool:
        """Remove the limit of ``instance_id``; True if it had one."""
        with self._changing(wait) as limits:
            return limits.pop(instance_id, None) is not None

    def keep(self, instance_id: str) -> float:
        """Start the idle clock of ``instance_id`` again, for every watcher; the time of the Keep."""
        with self._changing(LOCK_WAIT) as limits:
            if instance_id not in limits:
                raise InvalidInputError(f"Instance {instance_id} is not deleted when idle.")
            limits[instance_id]["keptAt"] = now = time.time()
        return now
