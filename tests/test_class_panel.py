"""``ClassPanel`` against a class gateway in front of a sandbox: the view, stopping, budgets, CSV."""

from __future__ import annotations

import csv
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from helpers import wait_for

from gpucloud_nb import GPUCloud
from gpucloud_nb.errors import InvalidInputError
from gpucloud_nb.gateway import Gateway
from gpucloud_nb.sandbox import Sandbox
from gpucloud_nb.widgets import ClassPanel
from tests.helpers import ADA, BOB, TEACHER, UPSTREAM_KEY, launch

GRACE = "gk-grace-000000000000004"
STUDENTS = (ADA, BOB, GRACE)


@pytest.fixture
def classroom(gateway_factory: Callable[..., Gateway]) -> Iterator[tuple[GPUCloud, list[GPUCloud]]]:
    """Ada with $20, Alan with nothing, Grace without a budget, and the teacher."""
    gateway = gateway_factory(f"{ADA} 20 Ada\n{BOB} 0 Alan\n{GRACE} - Grace\n"
                              f"{TEACHER} teacher T\n")
    students = [GPUCloud(api_key=key, base_url=gateway.url, max_retries=0) for key in STUDENTS]
    teacher = GPUCloud(api_key=TEACHER, base_url=gateway.url)
    yield teacher, students
    for cloud in (*students, teacher):
        cloud.close()


def test_stop_the_whole_class_asks_first_then_deletes_every_accounts_instances(
        classroom: tuple[GPUCloud, list[GPUCloud]], tmp_path: Path) -> None:
    teacher, (ada, _, grace) = classroom
    ids = {"ada": [launch(ada, "a1").id, launch(ada, "a2").id], "grace": [launch(grace).id]}
    panel = ClassPanel(teacher)
    try:
        assert [(r.name, r.instances) for r in panel.rows] == [("Ada", 2), ("Alan", 0),
                                                               ("Grace", 1)]
        assert "gpucloud-class-table" in panel.table.value and "$20.00" in panel.table.value
        assert "(spent)" in panel.table.value  # Alan has a budget of nothing
        assert panel.auto_refreshing
        question = panel.request_stop(None)
        assert question == ("Stop the whole class: 3 instances of 2 students? Data not on a "
                            "volume is lost.")
        assert panel.confirm_box.layout.display != "none"
        assert all(ada.instances.get(i).status != "deleting" for i in ids["ada"])  # asked only
        deleted = panel.confirm_stop()
        assert sorted(deleted) == sorted(ids["ada"] + ids["grace"])
        for cloud, mine in ((ada, ids["ada"]), (grace, ids["grace"])):
            for id_ in mine:
                assert cloud.instances.get(id_).status in ("deleting", "deleted")
        assert panel.status.text == "Stopping 3 instances of the whole class."
        wait_for(lambda: all(r.instances == 0 for r in panel.refresh()))
        assert not panel.auto_refreshing
        saved = panel.save_csv(tmp_path / "class.csv")
        table = list(csv.DictReader(saved.open(encoding="utf-8")))
        assert [row["name"] for row in table] == ["Ada", "Alan", "Grace"]
        assert not any(key in saved.read_text(encoding="utf-8") for key in STUDENTS)
    finally:
        panel.close()


def test_stop_all_of_one_student_and_cancel(classroom: tuple[GPUCloud, list[GPUCloud]]) -> None:
    teacher, (ada, _, grace) = classroom
    mine, theirs = launch(ada).id, launch(grace).id
    panel = ClassPanel(teacher)
    try:
        ada_row = panel.rows[0]
        assert panel.request_stop(ada_row.account) == \
            "Stop all 1 instance of Ada? Data not on a volume is lost."
        panel.cancel_stop()
        assert ada.instances.get(mine).status != "deleting"
        with pytest.raises(InvalidInputError, match="Nothing to confirm"):
            panel.confirm_stop()
        panel.student.value = ada_row.account
        panel.stop_student_button.click()
        panel.confirm_button.click()
        assert ada.instances.get(mine).status in ("deleting", "deleted")
        assert grace.instances.get(theirs).status not in ("deleting", "deleted")
        panel.refresh()
        with pytest.raises(InvalidInputError, match="Alan has no instance to stop."):
            panel.request_stop(panel.rows[1].account)
        assert panel.status.is_error
    finally:
        panel.close()


def test_a_student_key_shows_one_sentence(classroom: tuple[GPUCloud, list[GPUCloud]]) -> None:
    _, (ada, _, _) = classroom
    panel = ClassPanel(ada)
    try:
        assert panel.status.is_error and panel.rows == []
        assert "no teacher's view for this key" in panel.status.text
        assert ADA not in panel.status.value
    finally:
        panel.close()


def test_a_budget_changed_from_the_panel_holds_and_stop_all_reaches_the_cloud(
        upstream: Sandbox, gateway_factory: Callable[..., Gateway], tmp_path: Path) -> None:
    gateway = gateway_factory(f"{ADA} 20/day Ada\n{BOB} - Bob\n{TEACHER} teacher Grace\n")
    with GPUCloud(api_key=ADA, base_url=gateway.url) as ada, \
            GPUCloud(api_key=TEACHER, base_url=gateway.url) as teacher, \
            GPUCloud(api_key=UPSTREAM_KEY, base_url=upstream.management_url) as real:
        mine = launch(ada, "adas").id
        panel = ClassPanel(teacher)
        try:
            assert [(r.name, r.instances, r.budget, r.period) for r in panel.rows] == [
                ("Ada", 1, 20.0, "day"), ("Bob", 0, None, "")]
            assert "$20.00/day" in panel.table.value and ">key<" not in panel.table.value
            panel.student.value = panel.rows[1].account
            panel.budget.value = "5/week"
            panel.set_budget_button.click()
            assert panel.status.text == "Bob's budget is now $5.00/week."
            assert (panel.rows[1].budget, panel.rows[1].period) == (5.0, "week")
            assert "$5.00/week" in panel.table.value
            with pytest.raises(InvalidInputError, match="Type a budget first"):
                panel.set_budget(panel.rows[1].account, " ")
            assert panel.request_stop(None) == ("Stop the whole class: 1 instance of 1 student? "
                                                "Data not on a volume is lost.")
            assert panel.confirm_stop() == [mine]
            assert real.instances.get(mine).status in ("deleting", "deleted")
            table = list(csv.DictReader(panel.save_csv(tmp_path / "c.csv").open(encoding="utf-8")))
            assert [row["name"] for row in table] == ["Ada", "Bob"]
        finally:
            panel.close()
        student_panel = ClassPanel(ada)
        try:
            assert student_panel.status.is_error and "no teacher's view" in student_panel.status.text
        finally:
            student_panel.close()
