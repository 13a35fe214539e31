"""``%gpucloud budget``: what the gateway keeps for your money, in a few lines.

The key's own budget (spent, left, and the 80 % warning or what was deleted when it was spent),
then the budget of each instance that is not deleted, as ``create(..., budget=)`` or the launch
form's budget gave it to the gateway: its name, its budget, what it has cost and what is left.
``magics`` calls :func:`run` with the session's client.

    %gpucloud budget
    Ada: $0.00 spent; your key has no budget.
    Instance budgets:
      train (6650f0c2a1b2c3d4e5f60718): $0.40 spent of $5.00, $4.60 left
      eval (6650f0c2a1b2c3d4e5f60719): $0.10 spent of $2.00, $1.90 left

Chosen: off a gateway the command is one sentence saying there is none (nothing then keeps a
budget for the key); an instance at 80 % of its budget is marked on its line, as the sidebar
marks it; deleted instances are left out, as their budget ended with them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpucloud_nb.display import format_price
from gpucloud_nb.magics_output import label, say, warn
from gpucloud_nb.magics_parse import Stop

if TYPE_CHECKING:
    from gpucloud_nb.client.budgets import BudgetState
    from gpucloud_nb.client.management import GPUCloud
    from gpucloud_nb.models import Instance

__all__ = ["instance_lines", "run"]


def run(cloud: GPUCloud) -> None:
    """Print the key's budget and each live instance's budget (see the module docstring)."""
    status = cloud.gateway_status()
    if status is None:
        raise Stop("This cloud is not a class gateway, so it keeps no budget for your key; "
                   "see %gpucloud spend.")
    if status.budget is None or status.left is None:
        head = f"{status.name}: {format_price(status.spend)} spent; your key has no budget."
    else:
        head = (f"{status.name}: {format_price(status.spend)} spent of your budget of "
                f"{format_price(status.budget)}; {format_price(status.left)} left.")
    lines = instance_lines(cloud.instances.list(), cloud.budgets.states())
    say("\n".join([head, *(["Instance budgets:", *lines] if lines else [])]))
    if status.sentence():
        warn(status.sentence())


def instance_lines(instances: list[Instance], budgets: dict[str, BudgetState]) -> list[str]:
    """One line per instance not deleted that has a budget, by name.

        >>> from gpucloud_nb.client.budgets import BudgetState
        >>> from gpucloud_nb.models import Instance
        >>> box = Instance.from_json({"_id": "i-1", "name": "train", "status": "active"})
        >>> instance_lines([box], {"i-1": BudgetState("i-1", 5.0, 4.2, True, "active")})
        ['  train (i-1): $4.20 spent of $5.00, $0.80 left (80 % spent: deleted at $5.00)']
    """
    live = {i.id: i for i in instances if i.status not in ("deleting", "deleted")}
    held = sorted(((live[id].name, id, state) for id, state in budgets.items() if id in live))
    return [f"  {label(name, id)}: {format_price(state.spend)} spent of "
            f"{format_price(state.dollars)}, {format_price(state.left)} left"
            + (f" (80 % spent: deleted at {format_price(state.dollars)})" if state.warning else "")
            for name, id, state in held]
