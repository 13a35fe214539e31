"""``connect(cleanup_on_exit=True)`` deletes this process's instances when Python exits."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from gpucloud_nb import GPUCloud

SCRIPT = textwrap.dedent("""
    from gpucloud_nb import connect
    cloud = connect(cleanup_on_exit=True)
    offer = cloud.instances.offers(deployment_type="vm", available=True, sort="price")[0]
    for name in ("mine-1", "mine-2"):
        cloud.instances.create(name=name, cloud_provider=offer.cloud.id,
                               instance_id=offer.instance_id, region=offer.available_regions[0],
                               vm={"os": offer.configuration.os[0]})
    print("launched", len(cloud.instances.list()))
""")


@pytest.mark.parametrize("closed", [False, True], ids=["open", "closed-before-exit"])
def test_cleanup_on_exit_deletes_only_what_the_kernel_launched(sandbox, closed: bool) -> None:
    with GPUCloud(api_key=sandbox.api_key, base_url=sandbox.management_url) as cloud:
        offer = cloud.instances.offers(deployment_type="vm", available=True, sort="price")[0]
        other = cloud.instances.create(
            name="someone-else", cloud_provider=offer.cloud.id, instance_id=offer.instance_id,
            region=offer.available_regions[0], vm={"os": offer.configuration.os[0]})
        env = os.environ | {"GPUCLOUD_API_KEY": sandbox.api_key,
                            "GPUCLOUD_BASE_URL": sandbox.management_url}
        script = SCRIPT + ("cloud.close()\n" if closed else "")
        done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                              text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        assert done.stderr == ""
        assert "launched 3" in done.stdout
        statuses = {i.name: i.status for i in cloud.instances.list()}
        assert statuses["mine-1"] in ("deleting", "deleted")
        assert statuses["mine-2"] in ("deleting", "deleted")
        assert statuses["someone-else"] in ("pending", "active")
        assert other.status == "pending"


def test_cleanup_on_exit_says_which_instances_it_could_not_delete(sandbox_factory) -> None:
    """The cloud is gone at exit: one line per instance on stderr, no traceback."""
    sandbox = sandbox_factory()
    script = SCRIPT + textwrap.dedent("""
        import time
        cloud.close()              # a closed client still cleans up, with its own connection
        print("ready", flush=True)
        time.sleep(3)
    """)
    env = os.environ | {"GPUCLOUD_API_KEY": sandbox.api_key,
                        "GPUCLOUD_BASE_URL": sandbox.management_url}
    child = subprocess.Popen([sys.executable, "-c", script], env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    assert child.stdout is not None
    for line in child.stdout:
        if line.startswith("ready"):
            break
    sandbox.stop()  # the exit-time deletes cannot reach the cloud any more
    _, err = child.communicate(timeout=120)
    assert child.returncode == 0, err
    lines = [line for line in err.splitlines() if line.startswith("gpucloud-nb: could not delete")]
    assert len(lines) == 2, err
    assert all("may still be billing" in line for line in lines)
    assert "Traceback" not in err
