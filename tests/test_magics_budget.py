"""``%gpucloud budget`` (:mod:`gpucloud_nb.magics_budget`): the key's budget and each instance's,
read from a gateway in front of the sandbox, over real HTTP."""

from __future__ import annotations

from typing import Any

from gpucloud_nb import GPUCloud
from gpucloud_nb import magics as magics
from gpucloud_nb.display import format_price
from tests.helpers import ADA, launch_active, wait_for
from tests.test_magics import (  # noqa: F401 (fixtures)
    Magic,
    cloud,
    magic,
    sandbox_box,
    shell,
)


def test_budget_lists_each_instances_budget_and_its_spend_beside_the_keys(
        magic: Magic, gateway_factory: Any) -> None:  # noqa: F811 (fixtures)
    """#36: ``create(..., budget=)`` is kept by the gateway, and the sidebar named it, but
    ``%gpucloud budget`` only said "your key has no budget." Now it lists each live instance's
    budget, what it has cost and what is left; an instance without one and a deleted one are
    left out."""
    gateway = gateway_factory()  # Ada's key has no budget of its own
    with GPUCloud(api_key=ADA, base_url=gateway.url) as ada:
        magics.use(ada)
        train = launch_active(ada, "train", budget=5)
        launch_active(ada, "eval", budget=2)
        plain = launch_active(ada, "plain")
        run = magic("budget")
        assert run.value is None and run.err == ""
        lines = run.out.strip().splitlines()
        assert lines[0].startswith("Ada: $") and lines[0].endswith(
            " spent; your key has no budget.")
        assert lines[1] == "Instance budgets:" and len(lines) == 4
        assert lines[2].startswith("  eval (") and f" spent of {format_price(2)}, $" in lines[2]
        assert lines[3].startswith(f"  train ({train.id}): $")
        assert f" spent of {format_price(5)}, $" in lines[3]
        assert all(line.endswith(" left") for line in lines[2:])
        assert plain.id not in run.out and "plain" not in run.out

        ada.instances.delete(train.id)  # a deleted instance's budget ended with it
        wait_for(lambda: ada.instances.get(train.id).status in ("deleting", "deleted"),
                 timeout=60)
        after = magic("budget").out.strip().splitlines()
        assert len(after) == 3 and after[2].startswith("  eval (") and "train" not in after[2]


def test_budget_names_the_keys_budget_and_the_instances_of_a_student(
        magic: Magic, gateway_factory: Any) -> None:  # noqa: F811 (fixtures)
    gateway = gateway_factory(f"{ADA} 40 Ada\n")
    with GPUCloud(api_key=ADA, base_url=gateway.url) as ada:
        magics.use(ada)
        made = launch_active(ada, "lesson", budget=3)
        lines = magic("budget").out.strip().splitlines()
        assert lines[0].startswith("Ada: $") and lines[0].endswith(" left.")
        assert f" spent of your budget of {format_price(40)}; $" in lines[0]
        assert lines[1:2] == ["Instance budgets:"] and len(lines) == 3
        assert lines[2].startswith(f"  lesson ({made.id}): $")
        assert f" spent of {format_price(3)}, $" in lines[2]


def test_through_a_gateway_budget_and_instances_say_the_budget_was_spent(
        magic: Magic, upstream: Any, gateway_factory: Any) -> None:  # noqa: F811 (fixtures)
    from tests.helpers import gateway_cloud
    from tests.test_client_gateway import spent_budget

    gateway = spent_budget(upstream, gateway_factory)
    with gateway_cloud(gateway, ADA) as ada:
        magics.use(ada)
        run = magic("budget")
        assert run.value is None and run.out.startswith("Ada: $") and "left" in run.out
        assert run.err.startswith("Your budget of $") and run.err.strip().endswith(
            "deleted: spender.")
        listed = magic("instances --all")
        assert "deleted: spender." in listed.err and "Traceback" not in listed.err
        assert list(listed.value["name"]) == ["spender"]


def test_budget_off_a_gateway_is_one_sentence(magic: Magic, cloud: GPUCloud) -> None:  # noqa: F811
    run = magic("budget")
    assert run.value is None and run.out == ""
    assert run.err.strip() == ("This cloud is not a class gateway, so it keeps no budget for your "
                               "key; see %gpucloud spend.")
