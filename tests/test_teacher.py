"""The teacher's view from the client (``cloud.class_view``) against a class sandbox."""

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
from gpucloud_nb.errors import NotFoundError
from gpucloud_nb.sandbox import Sandbox

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
