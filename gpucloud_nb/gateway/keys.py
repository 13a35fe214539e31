"""The gateway's keys file: one person per line, read once at start; only hashes are kept.

    >>> text = "gk-0123456789abcdef 20/day Ada Lovelace\\ngk-teacher-0123456789 teacher Grace\\n"
    >>> people = parse_keys(text)
    >>> [(p.name, p.budget, p.period, p.teacher) for p in people]
    [('Ada Lovelace', 20.0, 'day', False), ('Grace', None, '', True)]

A line is ``KEY BUDGET NAME…``: ``BUDGET`` is dollars (``20``), ``-`` for none, or dollars that
start again each day or week (``20/day``, ``20/week``, windows of UTC days and of weeks that start
on Monday 00:00 UTC); ``KEY teacher NAME…`` is a teacher. Blank lines, ``#`` comments and a UTF-8
byte-order mark are ignored. Choices (the issue is silent): a key has at least
:data:`MIN_KEY_LENGTH` characters and no line repeats one; a name is required (the teacher sees
it). A malformed line raises :class:`KeysFileError` with one sentence naming its line number.

A key is kept as ``sha256`` of its text (keys are long random strings, so no slow hash is
needed); :meth:`Keyring.find` compares the hash of what a request sends with every stored hash in
constant time (:func:`hmac.compare_digest`), so how long it takes says nothing about the keys.
"""

from __future__ import annotations

import hashlib
import hmac
import math
import secrets
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

__all__ = [
    "MIN_KEY_LENGTH",
    "Keyring",
    "KeysFileError",
    "Person",
    "hash_key",
    "new_line",
    "parse_budget",
    "parse_keys",
    "read_keys",
    "read_text",
]

MIN_KEY_LENGTH = 16
PERIODS = ("day", "week")


class KeysFileError(ValueError):
    """A keys file that cannot be used, with one sentence saying where and why."""


@dataclass(frozen=True)
class Person:
    """One line of the keys file, without its key: the hash, a short id, the name and the budget.

    ``account`` (the first 16 hex digits of the hash) names the person in the teacher's routes;
    ``group`` is the JupyterHub group the teacher's view files them under (a hub's people only,
    see :mod:`gpucloud_nb.gateway.hub_people`).
    """

    key_hash: str
    name: str
    budget: float | None
    period: str  # "", "day" or "week"
    teacher: bool
    group: str = ""

    @property
    def account(self) -> str:
        """The person's id in the gateway's routes and audit (reveals nothing of the key)."""
        return self.key_hash[:16]


def hash_key(key: str) -> str:
    """The hex ``sha256`` the gateway keeps of ``key``.

        >>> hash_key("gk-0123456789abcdef")[:12]
        'fc938fdbbcc0'
    """
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


def parse_budget(text: str) -> tuple[float | None, str]:
    """``(dollars or None, period)`` of a BUDGET field, or :class:`ValueError` with a reason.

        >>> parse_budget("20/week"), parse_budget("-")
        ((20.0, 'week'), (None, ''))
    """
    if text == "-":
        return None, ""
    amount, slash, period = text.partition("/")
    if slash and period not in PERIODS:
        raise ValueError(f"{text!r} is not a budget (dollars, '-', 'N/day' or 'N/week')")
    try:
        dollars = float(amount)
    except ValueError:
        dollars = -1.0
    if not (dollars >= 0 and math.isfinite(dollars)):
        raise ValueError(f"{text!r} is not a budget (dollars, '-', 'N/day' or 'N/week')")
    return dollars, period


def parse_keys(text: str) -> list[Person]:
    """The people of a keys file's ``text``; :class:`KeysFileError` names a malformed line."""
    people: list[Person] = []
    seen: set[str] = set()
    for number, line in enumerate(text.removeprefix("\ufeff").splitlines(), start=1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        fields = line.split(maxsplit=2)
        if len(fields) < 3:
            raise KeysFileError(f"Line {number} of the keys file is not 'KEY BUDGET NAME' "
                                "(or 'KEY teacher NAME').")
        key, budget_text, name = fields
        if len(key) < MIN_KEY_LENGTH:
            raise KeysFileError(f"Line {number} of the keys file has a key shorter than "
                                f"{MIN_KEY_LENGTH} characters; `gpucloud-nb gateway keys new` "
                                "makes one.")
        key_hash = hash_key(key)
        if key_hash in seen:
            raise KeysFileError(f"Line {number} of the keys file repeats the key of an earlier "
                                "line.")
        seen.add(key_hash)
        if budget_text == "teacher":
            people.append(Person(key_hash, name.strip(), None, "", True))
            continue
        try:
            dollars, period = parse_budget(budget_text)
        except ValueError as error:
            raise KeysFileError(f"Line {number} of the keys file: {error}.") from None
        people.append(Person(key_hash, name.strip(), dollars, period, False))
    if not people:
        raise KeysFileError("The keys file holds no key.")
    return people


def read_text(path: str, what: str = "keys file") -> str:
    """The UTF-8 text of the file at ``path`` (the ``what``: "keys file", "budgets file");
    :class:`KeysFileError` with one sentence when it cannot be read."""
    try:
        with open(path, encoding="utf-8") as file:
            return file.read()
    except UnicodeDecodeError:
        raise KeysFileError(f"The {what} {path} is not UTF-8 text.") from None
    except OSError as error:
        raise KeysFileError(f"Cannot read the {what} {path}: {error.strerror or error}.") from None


def read_keys(path: str) -> list[Person]:
    """The people of the keys file at ``path``; :class:`KeysFileError` for any problem."""
    return parse_keys(read_text(path))


def new_line(name: str, budget: str = "-") -> str:
    """A fresh keys-file line for ``name`` (a new random key); :class:`ValueError` for a bad budget.

        >>> new_line("Ada", "20").split()[1:]
        ['20', 'Ada']
    """
    if not name.strip() or "\n" in name:
        raise ValueError("the name must be one line of text")
    if budget != "teacher":
        parse_budget(budget)
    return f"gk-{secrets.token_urlsafe(24)} {budget} {name.strip()}"


class Keyring:
    """The people of a keys file, found by the key a request sends (in constant time)."""

    def __init__(self, people: Iterable[Person]) -> None:
        self.people: Sequence[Person] = tuple(people)

    def find(self, key: str | None) -> Person | None:
        """The person whose key is ``key``, or ``None``; compares every hash, always."""
        sent = hash_key(key or "").encode("ascii")
        found = None
        for person in self.people:
            if hmac.compare_digest(sent, person.key_hash.encode("ascii")):
                found = person
        return found if key else None

    def by_account(self, account: str) -> Person | None:
        """The person with this :attr:`Person.account`, or ``None``."""
        return next((p for p in self.people if p.account == account), None)
