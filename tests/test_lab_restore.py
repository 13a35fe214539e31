"""The routes behind the sidebar's Restore button, on a real ``jupyter server`` (the one of
``test_lab_server``, the sandbox as its cloud). A lost kernel restored through them, clicked in
Chromium, is ``tests/browser/test_kernel_in_lab.py``; the restore itself is
``test_kernel_revive``."""

from __future__ import annotations

import httpx
import pytest
import test_lab_server as base

counted_sandbox, server, api = base.counted_sandbox, base.server, base.api


@pytest.mark.parametrize(("method", "path"), [
    ("GET", "/gpucloud/kernels/lost"), ("POST", "/gpucloud/kernels/x/restore")])
def test_the_routes_refuse_without_the_token(server: str, method: str, path: str) -> None:
    assert httpx.request(method, server + path, timeout=10).status_code == 403
    wrong = httpx.request(method, server + path, headers={"Authorization": "token wrong"},
                          timeout=10)
    assert wrong.status_code == 403


def test_no_kernel_is_lost_and_an_unknown_one_is_a_404_with_one_sentence(
        api: httpx.Client) -> None:
    assert api.get("/gpucloud/kernels/lost").json() == {"kernels": []}
    response = api.post("/gpucloud/kernels/nope/restore")
    assert response.status_code == 404
    assert response.json() == {"message": "There is no kernel nope on this server."}

