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


UNREACHABLE_AT_EXIT = textwrap.dedent("""
    import atexit, os
    from gpucloud_nb.sandbox import Sandbox
    box = Sandbox(api_key="sk-cleanup-check-0123456789abcdef").start()
    os.environ.update(GPUCLOUD_API_KEY=box.api_key, GPUCLOUD_BASE_URL=box.management_url)
    from gpucloud_nb import connect
    cloud = connect(cleanup_on_exit=True)
    offer = cloud.instances.offers(deployment_type="vm", available=True, sort="price")[0]
    for name in ("lost-1", "lost-2"):
        cloud.instances.create(name=name, cloud_provider=offer.cloud.id,
                               instance_id=offer.instance_id, region=offer.available_regions[0],
                               vm={"os": offer.configuration.os[0]})
    cloud.close()
    atexit.register(box.stop)  # runs before the cleanup (atexit is last in, first out)
""")


def test_cleanup_on_exit_says_which_instances_it_could_not_delete() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUCLOUD_")}
    done = subprocess.run([sys.executable, "-c", UNREACHABLE_AT_EXIT], env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.startswith("gpucloud-nb:")]
    assert len(lines) == 2, done.stderr
    for name, line in zip(("lost-1", "lost-2"), lines, strict=True):
        assert f"gpucloud-nb: instance {name} (" in line
        assert "was not deleted at exit and may still be billing: " in line
    assert "Traceback" not in done.stderr
    assert "0123456789abcdef" not in done.stderr + done.stdout
