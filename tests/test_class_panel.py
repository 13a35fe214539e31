"""``ClassPanel`` against a class sandbox and a class gateway: the view, stopping, CSV."""

from __future__ import annotations

import csv
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from helpers import wait_for
from samples import one_offer
from test_budgets import launch

from gpucloud_nb import GPUCloud
from gpucloud_nb.errors import InvalidInputError
from gpucloud_nb.gateway import Gateway
from gpucloud_nb.sandbox import Sandbox
from gpucloud_nb.widgets import ClassPanel
from tests.helpers import ADA, BOB, UPSTREAM_KEY
from tests.helpers import TEACHER as GW_TEACHER
from tests.helpers import launch as gateway_launch

TEACHER = "teacher-key-0123456789abcdef"
STUDENTS = ("student-a-key-0123456789", "student-b-key-0123456789", "student-c-key-0123456789")


@pytest.fixture
def classroom(sandbox_factory: Callable[..., Sandbox]) -> Iterator[tuple[GPUCloud, list[GPUCloud]]]:
    box = sandbox_factory(api_key=STUDENTS[0], keys=STUDENTS[1:], teacher_key=TEACHER,
                          budgets={STUDENTS[0]: 20.0, STUDENTS[1]: 0.0},
                          names={STUDENTS[0]: "Ada", STUDENTS[1]: "Alan", STUDENTS[2]: "Grace"},
                          offers=one_offer(0.5))
    students = [GPUCloud(api_key=key, base_url=box.management_url) for key in STUDENTS]
    teacher = GPUCloud(api_key=TEACHER, base_url=box.management_url)
    yield teacher, students
    for cloud in (*students, teacher):
        cloud.close()


def test_stop_the_whole_class_asks_first_then_deletes_every_accounts_instances(
        classroom: tuple[GPUCloud, list[GPUCloud]], tmp_path: Path) -> None:
    teacher, (ada, _, grace) = classroom
    ids = {"ada": [launch(ada).id, launch(ada).id], "grace": [launch(grace).id]}
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
        assert STUDENTS[0] not in panel.status.value
    finally:
        panel.close()


def test_the_panel_works_against_a_class_gateway(
        upstream: Sandbox, gateway_factory: Callable[..., Gateway], tmp_path: Path) -> None:
    gateway = gateway_factory(f"{ADA} 20/day Ada\n{BOB} - Bob\n{GW_TEACHER} teacher Grace\n")
    with GPUCloud(api_key=ADA, base_url=gateway.url) as ada, \
            GPUCloud(api_key=GW_TEACHER, base_url=gateway.url) as teacher, \
            GPUCloud(api_key=UPSTREAM_KEY, base_url=upstream.management_url) as real:
        mine = gateway_launch(ada, "adas").id
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
