"""The teacher's view from the client (``cloud.class_view``) against a class sandbox and a gateway."""

from __future__ import annotations

import csv
import io
from collections.abc import Callable

import pytest
from helpers import wait_for
from samples import one_offer
from test_budgets import launch

from gpucloud_nb import GPUCloud
from gpucloud_nb.client.teacher import NOT_TEACHER
from gpucloud_nb.errors import InvalidInputError, NotFoundError
from gpucloud_nb.gateway import Gateway
from gpucloud_nb.sandbox import Sandbox
from tests.helpers import ADA as GW_ADA
from tests.helpers import BOB as GW_BOB
from tests.helpers import TEACHER as GW_TEACHER
from tests.helpers import launch as gateway_launch

TEACHER = "teacher-key-0123456789abcdef"
STUDENTS = ("student-a-key-0123456789", "student-b-key-0123456789", "student-c-key-0123456789")


def test_the_teacher_reads_exports_and_stops_the_class(
        sandbox_factory: Callable[..., Sandbox]) -> None:
    box = sandbox_factory(api_key=STUDENTS[0], keys=STUDENTS[1:], teacher_key=TEACHER,
                          budgets={STUDENTS[1]: 10.0}, names={STUDENTS[2]: "Grace"},
                          offers=one_offer(1.5))
    clouds = [GPUCloud(api_key=key, base_url=box.management_url) for key in STUDENTS]
    teacher = GPUCloud(api_key=TEACHER, base_url=box.management_url)
    try:
        ids = [launch(clouds[0]).id, launch(clouds[1]).id, launch(clouds[1]).id]
        for cloud, id_ in zip((clouds[0], clouds[1], clouds[1]), ids, strict=True):
            cloud.instances.wait_until_active(id_, timeout=10)
        view = teacher.class_view
        rows = view.accounts()
        assert [(r.name, r.instances, r.per_hour, r.budget) for r in rows] == [
            ("account 1", 1, 1.5, None), ("account 2", 2, 3.0, 10.0), ("Grace", 0, 0.0, None)]
        table = list(csv.DictReader(io.StringIO(view.csv(rows))))
        assert [row["name"] for row in table] == ["account 1", "account 2", "Grace"]
        assert table[1]["per_hour"] == "3.0" and table[1]["budget"] == "10.0"
        assert STUDENTS[1] not in view.csv(rows)  # keys are masked
        assert view.stop_student(rows[0].account) == ids[:1]
        assert sorted(view.stop_class()) == sorted(ids[1:])
        wait_for(lambda: all(r.instances == 0 for r in view.accounts()))
        frame = view.frame()
        assert list(frame["name"]) == ["account 1", "account 2", "Grace"]
        with pytest.raises(NotFoundError) as refused:
            clouds[0].class_view.accounts()
        assert str(refused.value) == NOT_TEACHER
    finally:
        for cloud in (*clouds, teacher):
            cloud.close()


def test_the_class_view_reads_and_changes_a_gateways_class(
        gateway_factory: Callable[..., Gateway]) -> None:
    gateway = gateway_factory(f"{GW_ADA} 0.01 Ada\n{GW_BOB} - Bob\n{GW_TEACHER} teacher Grace\n")
    with GPUCloud(api_key=GW_ADA, base_url=gateway.url, max_retries=0) as ada, \
            GPUCloud(api_key=GW_TEACHER, base_url=gateway.url) as teacher:
        view = teacher.class_view
        rows = view.accounts()
        assert view.on_gateway
        assert [(r.name, r.budget, r.key, r.idle_minutes) for r in rows] == [
            ("Ada", 0.01, "", None), ("Bob", None, "", None)]
        with pytest.raises(InvalidInputError):
            view.set_budget(rows[0].account, True)  # type: ignore[arg-type]
        with pytest.raises(InvalidInputError, match="not an account"):
            view.set_budget("a/b", 5)
        changed = view.set_budget(rows[0].account, "40/week")
        assert (changed.budget, changed.period) == (40.0, "week")
        made = gateway_launch(ada, "after-raise")
        assert [r.instances for r in view.accounts()] == [1, 0]
        assert [(e["name"], e["action"]) for e in view.audit()] == [("Ada", "budget"),
                                                                    ("Ada", "created")]
        table = list(csv.DictReader(io.StringIO(view.export_csv())))
        assert [(r["name"], r["budget"], r["period"]) for r in table] == [
            ("Ada", "40.0", "week"), ("Bob", "", "")]
        assert view.stop_student(rows[0].account) == [made.id]
        assert GW_ADA not in repr(view.accounts())


def test_a_student_key_gets_one_sentence(gateway_factory: Callable[..., Gateway]) -> None:
    gateway = gateway_factory()
    with GPUCloud(api_key=GW_ADA, base_url=gateway.url) as ada:
        with pytest.raises(NotFoundError, match="no teacher's view for this key"):
            ada.class_view.accounts()
        with pytest.raises(NotFoundError, match="no teacher's view for this key"):
            ada.class_view.stop_class()


def test_a_class_sandbox_keeps_working_without_gateway_features(
        sandbox_factory: Callable[..., Sandbox]) -> None:
    box = sandbox_factory(api_key="student-a-key-0123456789", teacher_key="teacher-key-0123456789",
                          names={"student-a-key-0123456789": "Ada"})
    with GPUCloud(api_key="teacher-key-0123456789", base_url=box.management_url) as teacher:
        view = teacher.class_view
        assert [row.name for row in view.accounts()] == ["Ada"] and not view.on_gateway
        assert view.stop_class() == []
        with pytest.raises(InvalidInputError, match="Only a class gateway"):
            view.set_budget(view.accounts()[0].account, 5)
