"""The cluster notes the sidebar groups by: pruned once their instance is gone, never too early."""

from __future__ import annotations

import os
import time

from gpucloud_nb.client import clusters

URL = "http://127.0.0.1:9/prune-test"


def test_prune_drops_deleted_and_long_unlisted_notes_and_keeps_the_rest() -> None:
    for instance_id in ("live", "gone", "old-unlisted", "new-unlisted"):
        clusters.note(URL, instance_id, "trio")
    old = time.time() - 120
    os.utime(clusters.folder(URL) / "old-unlisted", (old, old))
    pruned = clusters.prune(URL, {"live": "active", "gone": "deleted"})
    assert sorted(pruned) == ["gone", "old-unlisted"]
    # A listing taken just before a create need not show it yet: its note stays.
    assert clusters.members(URL) == {"live": "trio", "new-unlisted": "trio"}


def test_prune_of_a_cloud_without_notes_is_nothing() -> None:
    assert clusters.prune("http://127.0.0.1:9/never-noted", {}) == []
