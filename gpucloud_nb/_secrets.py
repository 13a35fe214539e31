"""Masking of API keys and inference secrets for reprs, logs and messages."""

from __future__ import annotations


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


def scrub(text: str, *secrets: str | None) -> str:
    """Replace every occurrence of each secret in ``text`` by its masked form.

        >>> scrub("bad key sk-live-0123456789abcdefa1b2", "sk-live-0123456789abcdefa1b2")
        'bad key sk-…a1b2'
    """
    for secret in secrets:
        if secret and len(secret) >= 4:
            text = text.replace(secret, mask(secret))
    return text


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

    def __reduce__(self) -> object:
        raise TypeError("A Secret cannot be pickled.")
