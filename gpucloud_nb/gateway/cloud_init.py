"""The gateway's key added to a create's cloud-init, the user's own cloud-init left as it was.

    >>> merged = with_gateway_key(None, "ssh-ed25519 AAAA gpucloud-nb-gateway")
    >>> base64.b64decode(merged).startswith(b"Content-Type: multipart/mixed")
    True

The result is what ``cloud-init devel make-mime`` writes, a MIME ``multipart/mixed`` message:

1. the user's ``vm.base64CloudInitScript``, if any, byte for byte: a MIME multipart message's
   parts are kept as they are (cloud-init reads nested parts alike), and a single script (a
   ``#cloud-config``, a ``#!`` shell script, anything else) is one ``text/plain`` part, which
   cloud-init reads by its first line exactly as it reads a script sent alone (a gzipped script is
   gunzipped first, as cloud-init does before anything else);
2. then the gateway's ``#cloud-config`` with one ``ssh_authorized_keys`` entry for the default
   user, and ``merge_how`` ``list(append)`` and ``dict(no_replace,recurse_list)``, so the key is
   appended to any keys the user's cloud-config gives rather than replacing them (cloud-init's
   default merge would let the last part's list win), and nothing else of the user's is changed.

Choice: the key is added only to creates that ask the gateway to delete them when idle
(:mod:`gpucloud_nb.gateway.idle`): every other VM is launched with exactly the cloud-init its
user sent, and the gateway holds a login on no machine it has no reason to look at. One VM whose
user's cloud-config lists ``users:`` without ``default`` has no default user, so the gateway
cannot log in; its GPU then counts as unreadable (idle, by the one rule), and only use reported
by the user's clients keeps it.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import email
import email.encoders
import email.message
import gzip
import io
import zlib
from email.mime.base import MIMEBase
from email.mime.multipart import MIMEMultipart
from email.mime.text import MIMEText

__all__ = ["with_gateway_key"]

_MAX_BYTES = 1 << 20


def _gateway_part(public: str) -> MIMEText:
    text = ("#cloud-config\n"
            "merge_how:\n"
            "  - name: list\n    settings: [append]\n"
            "  - name: dict\n    settings: [no_replace, recurse_list]\n"
            f"ssh_authorized_keys:\n  - {public}\n")
    return MIMEText(text, "cloud-config")


def _user_parts(raw: bytes) -> list[email.message.Message]:
    if raw[:2] == b"\x1f\x8b":
        # one that does not decompress is kept as it came: cloud-init on the VM says so
        with contextlib.suppress(OSError, EOFError, zlib.error):
            raw = gzip.GzipFile(fileobj=io.BytesIO(raw)).read(_MAX_BYTES)
    head = raw.lstrip()[:400].lower()
    if head.startswith((b"content-type:", b"mime-version:")):
        message = email.message_from_bytes(raw)
        if message.is_multipart():
            payload = message.get_payload()
            if isinstance(payload, list):
                return [part for part in payload if isinstance(part, email.message.Message)]
        return [message]
    part = MIMEBase("text", "plain", charset="utf-8")
    part.set_payload(raw)
    email.encoders.encode_base64(part)  # the bytes unchanged, whatever they are
    return [part]


def with_gateway_key(user_script: str | None, public: str) -> str:
    """``vm.base64CloudInitScript`` for a create: ``user_script`` (base64, or ``None``) and
    the gateway's ``public`` key, merged as the module docstring says."""
    message = MIMEMultipart()
    if user_script:
        try:
            raw = base64.b64decode(user_script, validate=True)
        except (binascii.Error, ValueError):
            raw = b""  # the create's own checks refuse it before this is sent
        for part in _user_parts(raw) if raw else []:
            message.attach(part)
    message.attach(_gateway_part(public))
    return base64.b64encode(message.as_bytes()).decode()
