"""dask-ctl itself, its CLI run as a user runs it, lists, scales and deletes a GPUCloudCluster
through our ``dask_cluster_discovery`` entry point and ``from_name``, against a sandbox.

dask-ctl 2024.1.0 (its last release) imports ``install_signal_handlers`` from
``distributed.cli.utils``, which distributed removed after 2026.3.0 (dask/distributed#9240), so
it cannot be imported beside the main venv's distributed. ``scripts/test`` therefore builds a
second venv, ``.venv-daskctl``, with distributed and dask 2026.3.0 (the newest that still have
it), dask-ctl and this package; dask-ctl's CLI runs there, on a cluster started here, from the
main venv (list, delete) or, for scale, with its sandbox, from the second venv: a worker that
dask-ctl's process adds is of its distributed. Its absence is a failure, never a skip.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest

from gpucloud_nb import GPUCloud
from gpucloud_nb.sandbox import Sandbox
from tests.helpers import wait_for

distributed = pytest.importorskip("distributed")

from gpucloud_nb.cluster import GPUCloudCluster  # noqa: E402  (needs distributed)

PYTHON = Path(__file__).resolve().parents[1] / ".venv-daskctl" / "bin" / "python"

pytestmark = pytest.mark.slow  # dask-ctl's CLI in a second venv, each call a few seconds


@pytest.fixture
def sandbox(sandbox_factory: Callable[..., Sandbox]) -> Sandbox:
    return sandbox_factory(launch_seconds=0.3, delete_seconds=0.2)


@pytest.fixture
def box(sandbox: Sandbox, own_home: Path) -> Iterator[GPUCloud]:
    # The user's own client, as a notebook's: its SSH key is the one connect() finds again in
    # dask-ctl's process (same HOME and config dir), not the sandbox's own.
    cloud = GPUCloud(api_key=sandbox.api_key, base_url=sandbox.management_url)
    yield cloud
    cloud.close()


def dask_cluster(sandbox: Sandbox | SimpleNamespace, *args: str) -> str:
    """``dask cluster ARGS`` (dask-ctl's CLI) in the second venv, pointed at ``sandbox``."""
    assert PYTHON.exists(), f"{PYTHON} is missing: ./scripts/test builds it"
    env = dict(os.environ, GPUCLOUD_API_KEY=sandbox.api_key,
               GPUCLOUD_BASE_URL=sandbox.management_url, GPUCLOUD_GATEWAY="off",
               COLUMNS="200", NO_COLOR="1", TERM="dumb")
    env.pop("PYTHONPATH", None)
    done = subprocess.run([str(PYTHON), "-m", "dask", "cluster", *args], env=env,
                          capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    return done.stdout


def rows(table: str) -> dict[str, list[str]]:
    """The rows of ``dask cluster list``'s table, by cluster name."""
    found = {}
    for line in table.splitlines():
        cells = line.split()
        if len(cells) >= 9 and cells[0] != "Name":
            found[cells[0]] = cells
    return found


def test_the_second_venv_holds_dask_ctl_beside_a_distributed_it_imports_with() -> None:
    assert PYTHON.exists(), f"{PYTHON} is missing: ./scripts/test builds it"
    out = subprocess.run(
        [str(PYTHON), "-c", "import dask_ctl.cli, distributed, gpucloud_nb.cluster.discovery;"
         "print(dask_ctl.__version__, distributed.__version__)"],
        capture_output=True, text=True, timeout=120, env=dict(os.environ, PYTHONPATH=""))
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.split() == ["2024.1.0", "2026.3.0"]


def test_dask_ctl_lists_the_cluster_and_deletes_it(box: GPUCloud, sandbox: Sandbox) -> None:
    assert rows(dask_cluster(sandbox, "list", "gpucloud")) == {}
    cluster = GPUCloudCluster(box, 2, name="ctlseen", shutdown_on_close=False)
    ids = cluster.instance_ids
    table = dask_cluster(sandbox, "list")
    listed = rows(table)
    assert list(listed) == ["ctlseen"], table
    _, address, typename, discovery, workers = listed["ctlseen"][:5]
    assert address.startswith("tls://127.0.0.1:"), address
    assert (typename, discovery, workers) == (
        "gpucloud_nb.cluster.spec.GPUCloudCluster", "gpucloud", "2")

    out = dask_cluster(sandbox, "delete", "ctlseen")
    assert "Deleted cluster ctlseen." in out, out
    wait_for(lambda: cluster.status.name == "closed", timeout=60,
             what=lambda: f"status {cluster.status.name}")
    every = {i.id: i.status for i in box.instances.list()}
    assert set(ids) <= set(every) and len(every) == 2
    assert set(every.values()) == {"deleted"}, every
    assert rows(dask_cluster(sandbox, "list", "gpucloud")) == {}
    cluster.close()


# A sandbox and a cluster made in the second venv, so that the scheduler, the workers and the
# worker dask-ctl's scale adds are all distributed 2026.3.0 (the sandbox's instances run its
# Python); kept until the test closes this process's stdin.
HOLDER = """
import json, sys
from gpucloud_nb import GPUCloud
from gpucloud_nb.cluster import GPUCloudCluster
from gpucloud_nb.sandbox import Sandbox
sandbox = Sandbox(launch_seconds=0.3, delete_seconds=0.2).start()
try:
    cloud = GPUCloud(api_key=sandbox.api_key, base_url=sandbox.management_url)
    cluster = GPUCloudCluster(cloud, 1, name="ctlscaled", shutdown_on_close=False)
    print("READY", json.dumps({"api_key": sandbox.api_key, "management_url": sandbox.management_url}),
          flush=True)
    sys.stdin.read()
    cluster.close()
finally:
    sandbox.stop()
"""


def test_dask_ctl_scales_a_cluster_of_its_own_distributed_and_deletes_it(own_home: Path) -> None:
    assert PYTHON.exists(), f"{PYTHON} is missing: ./scripts/test builds it"
    env = dict(os.environ, GPUCLOUD_GATEWAY="off")
    env.pop("PYTHONPATH", None)
    holder = subprocess.Popen([str(PYTHON), "-c", HOLDER], env=env, stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdin is not None
        line = ""
        for line in holder.stdout:  # after the cluster's progress lines
            if "READY " in line:
                break
        assert "READY " in line, f"the holder exited with {holder.wait(timeout=60)}"
        started = json.loads(line.partition("READY ")[2])
        sandbox = SimpleNamespace(**started)
        cloud = GPUCloud(api_key=sandbox.api_key, base_url=sandbox.management_url)
        assert rows(dask_cluster(sandbox, "list", "gpucloud"))["ctlscaled"][4] == "1"

        out = dask_cluster(sandbox, "scale", "ctlscaled", "2")
        assert "Scaled cluster ctlscaled to 2 workers." in out, out
        assert rows(dask_cluster(sandbox, "list", "gpucloud"))["ctlscaled"][4] == "2"
        live = {i.id for i in cloud.instances.list() if i.status in ("pending", "active")}
        assert len(live) == 2

        out = dask_cluster(sandbox, "delete", "ctlscaled")
        assert "Deleted cluster ctlscaled." in out, out
        assert {i.id: i.status for i in cloud.instances.list()} == dict.fromkeys(live, "deleted")
        assert rows(dask_cluster(sandbox, "list", "gpucloud")) == {}
        cloud.close()
    finally:
        if holder.stdin is not None:
            holder.stdin.close()
        try:
            holder.wait(timeout=120)
        except subprocess.TimeoutExpired:
            holder.kill()
            holder.wait(timeout=30)
