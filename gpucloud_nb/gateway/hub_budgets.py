"""Budgets of a hub's people: a default, one per hub group, one per user; a file and routes.

    >>> budgets = parse_budgets('default = 10\\n[groups]\\nphysics = "20/week"\\n[users]\\nada = 30\\n')
    >>> budgets.resolve("bob", ("physics", "chem"))
    (20.0, 'week', 'physics')
    >>> budgets.resolve("ada", ("physics",)), budgets.resolve("eve", ())
    ((30.0, '', 'physics'), (10.0, '', ''))

The file is TOML (``--budgets FILE``, read with :mod:`tomllib`; its tables say
which name is a group and which a user better than the keys file's columns could)::

    default = 10                 # dollars for anyone with no other budget ("-" or absent: none)
    teacher-group = "teachers"   # members are teachers, as hub admins are (or --teacher-group)

    [groups]                     # a hub group's budget for each of its members
    physics-101 = "20/week"      # dollars, "-" (none), "N/day" or "N/week", as in the keys file
    research = 100

    [users]                      # one user's own budget, over any group's
    ada = "30/day"

``--budget-default`` on the command line is taken over the file's ``default``, and
``--teacher-group`` over its ``teacher-group``. A malformed file is one sentence naming the
entry, and the gateway does not start.

**Which budget.** A person's budget is, first found: their own budget changed at runtime (the
teacher's ``PUT /gateway/class/accounts/{account}/budget`` or ``PUT
/gateway/hub/users/{name}/budget``), their ``[users]`` entry, their group's budget changed at
runtime (``PUT /gateway/hub/groups/{group}/budget``), their group's ``[groups]`` entry, the
default, else none. A person in several groups with budgets takes the **first** of those groups in
the order of ``[groups]`` (the file's order is its priority); that group is also the one the
teacher's view files them under (a person in no budgeted group is filed under the first of their
hub groups by name, or none). A budget changed at runtime is kept in the state file and wins over
the file until a teacher removes it (``DELETE`` on the same hub route); teachers have no budget,
as in a keys file. See :mod:`gpucloud_nb.gateway.hub_routes`.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field

from gpucloud_nb.gateway.keys import KeysFileError, parse_budget, read_text

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - the same parser, before the standard library had it
    import tomli as tomllib  # type: ignore[import-not-found,unused-ignore]

__all__ = ["Budget", "HubBudgets", "parse_budgets", "read_budgets"]

Budget = tuple[float | None, str]  # (dollars or None, "" | "day" | "week")
_NONE: Budget = (None, "")


@dataclass
class HubBudgets:
    """The budgets file (and command-line defaults), plus group budgets changed at runtime."""

    default: Budget = _NONE
    groups: dict[str, Budget] = field(default_factory=dict)  # the file's order is its priority
    users: dict[str, Budget] = field(default_factory=dict)
    teacher_group: str = ""
    group_changes: dict[str, Budget] = field(default_factory=dict)

    def group_of(self, groups: tuple[str, ...]) -> str:
        """The group a person of hub ``groups`` is budgeted and filed under ('' for none)."""
        budgeted = [g for g in (*self.groups, *self.group_changes) if g in groups]
        if budgeted:
            return budgeted[0]
        return sorted(groups)[0] if groups else ""

    def resolve(self, user: str, groups: tuple[str, ...]) -> tuple[float | None, str, str]:
        """``(dollars or None, period, group)`` for hub ``user`` in ``groups`` (no runtime
        change of the user's own: :func:`gpucloud_nb.gateway.hub_people.hub_person` looks first).
        """
        group = self.group_of(groups)
        if user in self.users:
            budget = self.users[user]
        elif group in self.group_changes:
            budget = self.group_changes[group]
        elif group in self.groups:
            budget = self.groups[group]
        else:
            budget = self.default
        return budget[0], budget[1], group


def _budget(value: object, where: str) -> Budget:
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise KeysFileError(f"The budgets file's {where} must be dollars, '-', 'N/day' or "
                            "'N/week'.")
    try:
        return parse_budget(str(value).strip())
    except ValueError as error:
        raise KeysFileError(f"The budgets file's {where}: {error}.") from None


def parse_budgets(text: str, *, default: str | None = None,
                  teacher_group: str | None = None) -> HubBudgets:
    """The budgets of a TOML ``text``; ``default``/``teacher_group`` (the command line) win."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise KeysFileError(f"The budgets file is not TOML: {error}.") from None
    unknown = sorted(set(data) - {"default", "teacher-group", "groups", "users"})
    if unknown:
        raise KeysFileError(f"The budgets file has an entry {unknown[0]!r} it does not know "
                            "(default, teacher-group, [groups], [users]).")
    budgets = HubBudgets()
    if "default" in data:
        budgets.default = _budget(data["default"], "default")
    if default is not None:
        budgets.default = _budget(default, "--budget-default")
    group = data.get("teacher-group", "")
    if not isinstance(group, str):
        raise KeysFileError("The budgets file's teacher-group must be a group's name.")
    budgets.teacher_group = teacher_group if teacher_group is not None else group
    for table in ("groups", "users"):
        entries = data.get(table, {})
        if not isinstance(entries, dict):
            raise KeysFileError(f"The budgets file's {table} must be a table [{table}].")
        target = budgets.groups if table == "groups" else budgets.users
        for name, value in entries.items():
            target[name] = _budget(value, f"[{table}] {name}")
    return budgets


def read_budgets(path: str | None, *, default: str | None = None,
                 teacher_group: str | None = None) -> HubBudgets:
    """The budgets file at ``path`` (``None``: only the command line's); one sentence if bad."""
    if path is None:
        return parse_budgets("", default=default, teacher_group=teacher_group)
    return parse_budgets(read_text(path, "budgets file"), default=default,
                         teacher_group=teacher_group)
