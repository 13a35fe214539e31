"""A create's cloud-init user data, read as cloud-init on a VM reads it: SSH keys and scripts.

    >>> import base64
    >>> text = "#cloud-config\\nssh_authorized_keys: [ssh-ed25519 AAAA one]\\n"
    >>> read(base64.b64encode(text.encode()).decode()).keys
    {'': ('ssh-ed25519 AAAA one',)}

The spec's ``vm.base64CloudInitScript`` is "a base64-encoded cloud-init script run during instance
initialisation". The sandbox honours the parts of it a notebook user meets, as cloud-init does:

- **What is read.** The decoded bytes (gunzipped first if gzip-compressed, as cloud-init does) are
  one part, or a MIME multipart message (``Content-Type: multipart/mixed``, what ``cloud-init
  devel make-mime`` writes to merge several parts) whose parts are each read. A part is known by
  its ``Content-Type`` (``text/cloud-config``, ``text/x-shellscript``) or, for ``text/plain`` and
  a single part, by its first line (``#cloud-config``, ``#!``), as cloud-init's handlers do.
- **Keys.** A ``#cloud-config``'s top-level ``ssh_authorized_keys`` are the default user's
  (``sshUser``: ``ubuntu``); ``users: [{name: NAME, ssh_authorized_keys: [...]}]`` are NAME's
  (``default`` or no name: the default user). Each key logs in to the instance's SSH server as
  that user (:mod:`gpucloud_nb.sandbox.ssh`), besides the create's ``sshKey``. Several
  cloud-config parts add their keys together (what cloud-init's ``list(append)`` merge gives; its
  default merge would keep the last part's list only: the sandbox is the more lenient here).
  One thing a VM does that the sandbox does not: a ``users:`` list without ``default`` leaves a VM
  with no default user; the sandbox keeps its ``sshUser``.
- **Scripts.** Each shell-script part (``#!``) runs once, at the instance's first boot (when its
  SSH server first opens), in its home with the instance's environment, as the instance's own
  process (measured as its use, killed with it); its output goes to
  ``~/cloud-init-output.log``, as on a VM to ``/var/log/cloud-init-output.log``.
- **What cannot be read** (not base64 is refused at create by the spec's checks; a gzip or MIME
  body that is broken, YAML that does not parse, a part type the sandbox does not run:
  ``#include``, ``#cloud-boothook``, jinja templates, ``#part-handler``): the instance boots
  anyway and the log names what was skipped, which is what cloud-init does on a VM (it logs a
  warning and goes on; the create never fails for it).
- **Offers without cloud-init** (``cloudInitAvailable`` false, every container offer): a create
  that sends a script is refused with a 400 before anything launches ("Offer … does not support
  cloud-init scripts.", :func:`gpucloud_nb.rules.instance_create_problem`), rather than launched
  with the script silently dropped: a user whose setup would never run is told so at once.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import email
import email.message
import gzip
import io
import shlex
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import yaml

__all__ = ["UserData", "cloud_init_keys", "read", "run_scripts_once"]

_MAX_BYTES = 1 << 20  # the request body is at most 1 MB; a gzip bomb stops here too
_CONFIG_TYPES = ("text/cloud-config", "text/cloud-config-jsonp")
_SCRIPT_TYPES = ("text/x-shellscript",)


@dataclass(frozen=True)
class UserData:
    """What cloud-init would act on: keys by user name (``""``: the default user), scripts,
    and a short note for each part it skipped."""

    keys: dict[str, tuple[str, ...]] = field(default_factory=dict)
    scripts: tuple[str, ...] = ()
    skipped: tuple[str, ...] = ()

    def as_doc(self) -> dict[str, Any]:
        """The form kept in an instance's stored document."""
        return {"keys": {user: list(keys) for user, keys in self.keys.items()},
                "scripts": list(self.scripts)}


def read(encoded: str | None) -> UserData:
    """The user data of ``vm.base64CloudInitScript`` (``None`` or empty: nothing)."""
    if not encoded:
        return UserData()
    try:
        raw = base64.b64decode(encoded, validate=True)
    except (binascii.Error, ValueError):
        return UserData(skipped=("not base64",))
    if raw[:2] == b"\x1f\x8b":
        try:
            raw = gzip.GzipFile(fileobj=io.BytesIO(raw)).read(_MAX_BYTES)
        except (OSError, EOFError, zlib.error):
            return UserData(skipped=("a gzip body that does not decompress",))
    keys: dict[str, list[str]] = {}
    scripts: list[str] = []
    skipped: list[str] = []
    for kind, text in _parts(raw, skipped):
        if kind == "config":
            _read_config(text, keys, skipped)
        elif kind == "script":
            scripts.append(text)
    return UserData(keys={user: tuple(found) for user, found in keys.items()},
                    scripts=tuple(scripts), skipped=tuple(skipped))


def _kind_by_start(text: str) -> str | None:
    first = text.lstrip("\ufeff").split("\n", 1)[0].strip()
    if first.startswith("#cloud-config"):
        return "config"
    if first.startswith("#!"):
        return "script"
    return None


def _parts(raw: bytes, skipped: list[str]) -> list[tuple[str, str]]:
    head = raw.lstrip()[:400].lower()
    if head.startswith((b"content-type:", b"mime-version:")):
        message = email.message_from_bytes(raw)
        if not message.is_multipart():
            return _one(message, skipped)
        found: list[tuple[str, str]] = []
        for part in message.walk():
            if not part.is_multipart():
                found.extend(_one(part, skipped))
        if message.defects and not found:
            skipped.append("a MIME message that could not be read")
        return found
    text = raw.decode("utf-8", errors="replace")
    kind = _kind_by_start(text)
    if kind is None:
        skipped.append(f"a part starting {text[:20]!r}")
        return []
    return [(kind, text)]


def _one(part: email.message.Message, skipped: list[str]) -> list[tuple[str, str]]:
    payload = part.get_payload(decode=True)
    if not isinstance(payload, bytes):
        skipped.append("an empty MIME part")
        return []
    text = payload.decode(part.get_content_charset() or "utf-8", errors="replace")
    content_type = part.get_content_type()
    if content_type in _CONFIG_TYPES:
        return [("config", text)]
    if content_type in _SCRIPT_TYPES:
        return [("script", text)]
    kind = _kind_by_start(text) if content_type in ("text/plain", "text/x-not-multipart") else None
    if kind is None:
        skipped.append(f"a {content_type} part")
        return []
    return [(kind, text)]


def _key_list(value: Any) -> list[str]:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list):
        return []
    return [item.strip() for item in value if isinstance(item, str) and item.strip()]


def _read_config(text: str, keys: dict[str, list[str]], skipped: list[str]) -> None:
    try:
        config = yaml.safe_load(text)
    except yaml.YAMLError:
        skipped.append("a #cloud-config that is not YAML")
        return
    if config is None:
        return
    if not isinstance(config, dict):
        skipped.append("a #cloud-config that is not a mapping")
        return
    keys.setdefault("", []).extend(_key_list(config.get("ssh_authorized_keys")))
    users = config.get("users")
    for user in users if isinstance(users, list) else []:
        if isinstance(user, dict):
            name = user.get("name")
            name = "" if not isinstance(name, str) or name in ("", "default") else name
            keys.setdefault(name, []).extend(_key_list(user.get("ssh_authorized_keys")))
    for name in [name for name, found in keys.items() if not found]:
        del keys[name]


def cloud_init_keys(doc: dict[str, Any], username: str, default_user: str) -> list[str]:
    """The keys cloud-init gave ``username`` on the instance whose stored document is ``doc``.

        >>> doc = {"cloudInit": {"keys": {"": ["k1"], "bob": ["k2"]}}}
        >>> cloud_init_keys(doc, "ubuntu", "ubuntu"), cloud_init_keys(doc, "bob", "ubuntu")
        (['k1'], ['k2'])
    """
    stored = doc.get("cloudInit")
    keys = stored.get("keys") if isinstance(stored, dict) else None
    if not isinstance(keys, dict):
        return []
    found = keys.get("" if username == default_user else username)
    return [key for key in found if isinstance(key, str)] if isinstance(found, list) else []


class BootingInstance(Protocol):
    """What first boot needs of an instance's server (:class:`gpucloud_nb.sandbox.ssh`'s).

    Named here, not imported, so that this module stays below the SSH server that calls it.
    """

    record: Any
    home: Path
    bin: Path
    groups: set[int]
    boot_tasks: set[asyncio.Task[int]]

    def environment(self) -> dict[str, str]: ...


async def run_scripts_once(server: BootingInstance) -> None:
    """Start the shell-script parts of ``server``'s instance, once in its life (first boot).

    Each runs detached in the instance's home with its environment, so it is the instance's
    process like any other; a marker file in the home keeps a restarted service from running
    them again.
    """
    stored = server.record.doc.get("cloudInit")
    scripts = stored.get("scripts") if isinstance(stored, dict) else None
    ran = server.home / ".cloud-init-ran"
    if not isinstance(scripts, list) or not scripts or ran.exists():
        return
    ran.write_text("")
    output = server.home / "cloud-init-output.log"
    for number, script in enumerate(s for s in scripts if isinstance(s, str)):
        path = server.bin / f"cloud-init-part-{number:03d}"
        path.write_text(script)
        path.chmod(0o700)
        try:
            child = await asyncio.create_subprocess_exec(
                "/bin/sh", "-c", f"{shlex.quote(str(path))} >> {shlex.quote(str(output))} 2>&1",
                cwd=server.home, env=server.environment(), stdin=asyncio.subprocess.DEVNULL,
                start_new_session=True)
        except OSError as error:
            with output.open("a") as file:
                file.write(f"cloud-init: part {number} did not start: {error}\n")
            continue
        server.groups.add(child.pid)
        server.boot_tasks.add(asyncio.create_task(child.wait()))
