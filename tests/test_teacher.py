"""The teacher's view from the client (``cloud.class_view``) against a gateway in front of a sandbox."""

from __future__ import annotations

import csv
import io
from collections.abc import Callable

import pytest
from helpers import wait_for

from gpucloud_nb import GPUCloud
from gpucloud_nb.client.teacher import NOT_TEACHER
from gpucloud_nb.errors import InvalidInputError, NotFoundError
from gpucloud_nb.gateway import Gateway
from gpucloud_nb.sandbox import Sandbox
from tests.helpers import ADA as GW_ADA
from tests.helpers import BOB as GW_BOB
from tests.helpers import TEACHER as GW_TEACHER
from tests.helpers import UPSTREAM_KEY
from tests.helpers import launch as gateway_launch

GRACE = "gk-grace-000000000000004"


def test_the_teacher_reads_exports_and_stops_the_class(
        upstream: Sandbox, gateway_factory: Callable[..., Gateway]) -> None:
    gateway = gateway_factory(f"{GW_ADA} - Ada\n{GW_BOB} 10 Bob\n{GRACE} - Grace\n"
                              f"{GW_TEACHER} teacher T\n")
    clouds = [GPUCloud(api_key=key, base_url=gateway.url, max_retries=0)
              for key in (GW_ADA, GW_BOB, GRACE)]
    teacher = GPUCloud(api_key=GW_TEACHER, base_url=gateway.url)
    real = GPUCloud(api_key=UPSTREAM_KEY, base_url=upstream.management_url)
    try:
        ids = [gateway_launch(clouds[0]).id, gateway_launch(clouds[1]).id,
               gateway_launch(clouds[1]).id]
        for cloud, id_ in zip((clouds[0], clouds[1], clouds[1]), ids, strict=True):
            cloud.instances.wait_until_active(id_, timeout=30)
        price = real.instances.get(ids[0]).hourly_price
        view = teacher.class_view
        rows = view.accounts()
        assert [(r.name, r.instances, r.per_hour, r.budget) for r in rows] == [
            ("Ada", 1, price, None), ("Bob", 2, 2 * price, 10.0), ("Grace", 0, 0.0, None)]
        table = list(csv.DictReader(io.StringIO(view.csv(rows))))
        assert [row["name"] for row in table] == ["Ada", "Bob", "Grace"]
        assert float(table[1]["per_hour"]) == 2 * price and table[1]["budget"] == "10.0"
        assert not any(key in view.csv(rows) for key in (GW_ADA, GW_BOB, GRACE))
        assert view.stop_student(rows[0].account) == ids[:1]
        assert sorted(view.stop_class()) == sorted(ids[1:])
        wait_for(lambda: all(r.instances == 0 for r in view.accounts()), timeout=60)
        for id_ in ids:  # the upstream deleted them: the teacher's stop is the cloud's delete
            assert real.instances.get(id_).status in ("deleting", "deleted")
        frame = view.frame()
        assert list(frame["name"]) == ["Ada", "Bob", "Grace"]
        with pytest.raises(NotFoundError) as refused:
            clouds[0].class_view.accounts()
        assert str(refused.value) == NOT_TEACHER
    finally:
        for cloud in (*clouds, teacher, real):
            cloud.close()


def test_the_real_cloud_or_a_sandbox_has_no_teachers_view(sandbox: Sandbox) -> None:
    with GPUCloud(api_key=sandbox.api_key, base_url=sandbox.management_url) as cloud:
        with pytest.raises(NotFoundError) as refused:
            cloud.class_view.accounts()
        assert str(refused.value) == NOT_TEACHER
        assert "gpucloud-nb gateway --keys FILE" in NOT_TEACHER


def test_the_class_view_reads_and_changes_a_gateways_class(
        gateway_factory: Callable[..., Gateway]) -> None:
    gateway = gateway_factory(f"{GW_ADA} 0.01 Ada\n{GW_BOB} - Bob\n{GW_TEACHER} teacher Grace\n")
    with GPUCloud(api_key=GW_ADA, base_url=gateway.url, max_retries=0) as ada, \
            GPUCloud(api_key=GW_TEACHER, base_url=gateway.url) as teacher:
        view = teacher.class_view
        rows = view.accounts()
        assert [(r.name, r.budget) for r in rows] == [("Ada", 0.01), ("Bob", None)]
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
