"""Masking of API keys, inference secrets and URL passwords for reprs, logs and messages."""

from __future__ import annotations

import re
import traceback
from typing import NoReturn

# scheme://userinfo@ : everything up to the last "@" before the host's end is user name or password
# (one already masked, "***" or "…", is left as it is)
_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.\-]*://)(?!(?:\*\*\*|…)@)[^\s/?#\"'<>]+@")


def mask(secret: str | None) -> str:
    """Return a form of ``secret`` that is safe to show: at most the first 3 and last 4 characters.

        >>> mask("sk-live-0123456789abcdefa1b2")
        'sk-…a1b2'
        >>> mask("short")
        '…'
    """
    if not secret:
        return "None"
    if len(secret) >= 16:
        return f"{secret[:3]}…{secret[-4:]}"
    return "…"


def mask_url(text: str) -> str:
    """``text`` with the user name and password of every URL in it shown as ``***``.

        >>> mask_url("see http://user:pass@host:8000/v1")
        'see http://***@host:8000/v1'
    """
    return _USERINFO.sub(r"\1***@", text)


def without_userinfo(url: str) -> str:
    """``url`` without its user name and password (what an HTTP client logs carries none).

        >>> without_userinfo("http://user:pass@host:8000/v1")
        'http://host:8000/v1'
    """
    match = _USERINFO.match(url)
    return match.group(1) + url[match.end():] if match else url


def scrub(text: str, *secrets: str | None) -> str:
    """Replace every occurrence of each secret in ``text`` by its masked form, and every URL's
    user name and password by ``***`` (:func:`mask_url`).

        >>> scrub("bad key sk-live-0123456789abcdefa1b2", "sk-live-0123456789abcdefa1b2")
        'bad key sk-…a1b2'
    """
    # Long secrets first, so that one contained in another is still masked whole.
    for secret in sorted((s for s in secrets if s and len(s) >= 4), key=len, reverse=True):
        text = text.replace(secret, mask(secret))
    return mask_url(text)


def scrub_exception(error: BaseException, *secrets: str | None) -> str:
    """``error``'s traceback (with its causes) as text, scrubbed like :func:`scrub`: for a log.

        >>> log.debug("The request failed:\\n%s", scrub_exception(error, secret))  # doctest: +SKIP
    """
    return scrub("".join(traceback.format_exception(error)), *secrets)


class Secret:
    """A key held so that no repr, str or f-string can show it; ``reveal()`` gives the value.

        >>> key = Secret("sk-live-0123456789abcdefa1b2")
        >>> key
        Secret('sk-…a1b2')
        >>> key.reveal()
        'sk-live-0123456789abcdefa1b2'
    """

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def reveal(self) -> str:
        """Return the secret itself, for the one header that needs it."""
        return self._value

    def __repr__(self) -> str:
        return f"Secret({mask(self._value)!r})"

    __str__ = __repr__

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Secret) and other._value == self._value

    def __hash__(self) -> int:
        return hash(self._value)

    def __reduce__(self) -> NoReturn:
        raise TypeError("A Secret cannot be pickled.")
