"""The teacher's routes of a class sandbox, over real HTTP: the view, and stopping students."""

from __future__ import annotations

from collections.abc import Callable

import httpx
import pytest
from helpers import wait_for
from samples import one_offer
from test_sandbox_budgets import launch, status

from gpucloud_nb.sandbox import Sandbox
from gpucloud_nb.sandbox.app import user_id

TEACHER = "teacher-key-0123456789abcdef"
STUDENTS = ("student-a-key-0123456789", "student-b-key-0123456789", "student-c-key-0123456789")


@pytest.fixture
def box(sandbox_factory: Callable[..., Sandbox]) -> Sandbox:
    return sandbox_factory(api_key=STUDENTS[0], keys=STUDENTS[1:], teacher_key=TEACHER,
                           budgets={STUDENTS[0]: 20.0, STUDENTS[1]: 5.0},
                           names={STUDENTS[0]: "Ada"}, offers=one_offer(2.0))


def test_the_teacher_sees_every_account_with_the_right_totals(
        box: Sandbox, management_client_factory: Callable[..., httpx.Client]) -> None:
    a, b, c = (management_client_factory(box, api_key=key) for key in STUDENTS)
    teacher = management_client_factory(box, api_key=TEACHER)
    ids = [launch(a, "a1")["_id"], launch(a, "a2")["_id"], launch(b, "b1")["_id"]]
    wait_for(lambda: all(status(api, id_) == "active" for api, id_ in zip((a, a, b), ids, strict=True)))
    rows = teacher.get("/sandbox/class").json()["accounts"]
    assert [(r["name"], r["key"], r["instances"], r["perHour"], r["budget"]) for r in rows] == [
        ("Ada", "stu…6789", 2, 4.0, 20.0), ("account 2", "stu…6789", 1, 2.0, 5.0),
        ("account 3", "stu…6789", 0, 0.0, None)]
    assert [r["account"] for r in rows] == [user_id(key) for key in STUDENTS]
    assert rows[2]["idleMinutes"] is None and rows[0]["idleMinutes"] < 1  # c never called
    assert rows[2]["left"] is None
    # Stopped, the spend no longer moves: each total is what the account itself is told.
    assert teacher.delete("/sandbox/class/instances").json()["deleted"] == ids
    wait_for(lambda: all(status(api, id_) == "deleted" for api, id_ in zip((a, a, b), ids, strict=True)))
    rows = teacher.get("/sandbox/class").json()["accounts"]
    for row, api in zip(rows, (a, b, c), strict=True):
        assert row["spend"] == api.get("/sandbox/status").json()["spend"]
        assert row["instances"] == 0 and row["perHour"] == 0.0
    assert rows[0]["spend"] > 0 and rows[0]["left"] == round(20.0 - rows[0]["spend"], 6)


def test_stop_all_of_one_student_leaves_the_others_running(
        box: Sandbox, management_client_factory: Callable[..., httpx.Client]) -> None:
    a, b = (management_client_factory(box, api_key=key) for key in STUDENTS[:2])
    teacher = management_client_factory(box, api_key=TEACHER)
    mine, theirs = launch(a)["_id"], launch(b)["_id"]
    stopped = teacher.delete(f"/sandbox/class/accounts/{user_id(STUDENTS[0])}/instances")
    assert stopped.json() == {"deleted": [mine]}
    assert status(a, mine) in ("deleting", "deleted") and status(b, theirs) != "deleting"
    unknown = teacher.delete("/sandbox/class/accounts/nobody/instances")
    assert unknown.status_code == 404 and unknown.json()["message"] == "Account nobody not found."


def test_a_student_key_gets_404_on_the_teacher_routes(
        box: Sandbox, management_client_factory: Callable[..., httpx.Client]) -> None:
    student = management_client_factory(box, api_key=STUDENTS[1])
    mine = launch(student)["_id"]
    for method, path in (("GET", "/sandbox/class"), ("DELETE", "/sandbox/class/instances"),
                         ("DELETE", f"/sandbox/class/accounts/{user_id(STUDENTS[1])}/instances")):
        for api in (student, management_client_factory(box, api_key="wrong-key-0123456789")):
            answer = api.request(method, path)
            assert answer.status_code == 404
            assert answer.json()["message"] == f"There is no endpoint {method} {path}."
    assert status(student, mine) != "deleting"
    # The teacher's key is an account of its own, with nothing of the students' in it.
    assert management_client_factory(box, api_key=TEACHER).get("/gpu-cloud/instances").json() == []


def test_without_a_teacher_key_there_is_no_teacher_route(
        sandbox_factory: Callable[..., Sandbox],
        management_client_factory: Callable[..., httpx.Client]) -> None:
    api = management_client_factory(sandbox_factory(keys=STUDENTS))
    assert api.get("/sandbox/class").status_code == 404
