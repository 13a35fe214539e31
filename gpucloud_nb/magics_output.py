"""What ``%gpucloud`` prints and asks: one line to stdout or stderr with every secret masked and
control characters escaped, a y/N question, a hidden prompt for a secret, and short labels.

    >>> label("train", "6650f0c2"), gb(100.0), names([])
    ('train (6650f0c2)', '100 GB', 'none')
"""

from __future__ import annotations

import getpass
import sys
import unicodedata
from collections.abc import Iterable

from gpucloud_nb._secrets import scrub
from gpucloud_nb.magics_client import session
from gpucloud_nb.magics_parse import Stop

__all__ = ["ask_secret", "clean", "confirm", "gb", "label", "names", "printable", "say", "warn"]

#: Unicode categories shown escaped: controls, format characters (bidi overrides such as U+202E,
#: zero-width marks), surrogates, private use, and line/paragraph separators.
_HIDDEN_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Co", "Zl", "Zp"})


def printable(text: str) -> str:
    """``text`` with control and bidi characters written as escapes (``\\u202e``).

    A name from the server holding a right-to-left override would otherwise reorder the rest of
    the line it is printed in (``evil\\u202etxt.exe`` shows as ``evilexe.txt``).
    """
    if text.isascii() and text.isprintable():
        return text
    out = []
    for ch in text:
        if ch != "\n" and unicodedata.category(ch) in _HIDDEN_CATEGORIES:
            code = ord(ch)
            out.append(f"\\x{code:02x}" if code < 0x100 else
                       f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}")
        else:
            out.append(ch)
    return "".join(out)


def clean(text: str, *secrets: str) -> str:
    """Mask the secrets the session's client holds, and ``secrets`` (asked for in this call);
    control and bidi characters are written as escapes (see :func:`printable`)."""
    cloud = session["cloud"]
    text = cloud.scrub(text) if cloud is not None else text
    return printable(scrub(text, *secrets))


def say(text: str) -> None:
    """Report to stdout (confirmations, cancellations)."""
    print(clean(text), flush=True)


def warn(text: str) -> None:
    """Report a failure to stderr, on one line (shown red in Jupyter)."""
    print(clean(" ".join(text.splitlines())), file=sys.stderr, flush=True)


def confirm(question: str, refusal: str) -> bool:
    """Ask a y/N question with ``input()``; True only for y or yes."""
    try:
        answer = input(f"{clean(question)} [y/N] ")
    except (EOFError, NotImplementedError):
        # No stdin (a non-interactive run, or a frontend without input support).
        raise Stop(refusal) from None
    return answer.strip().lower() in ("y", "yes")


def ask_secret(prompt: str) -> str:
    """Read a secret with a hidden ``getpass`` prompt; never echoed, never in the cell."""
    try:
        value = getpass.getpass(prompt)
    except (EOFError, NotImplementedError):
        raise Stop("No secret could be asked for here (no input is possible in this run).") from None
    return (value or "").strip()


def label(name: str, id: str) -> str:
    return f"{name} ({id})" if name and name != id else id


def gb(size: float) -> str:
    return f"{size:g} GB"


def names(items: Iterable[str]) -> str:
    return ", ".join(items) or "none"
