"""The exception hierarchy: one tree, every class exported, the tree in the docs matches."""

from __future__ import annotations

import inspect

import pytest

import gpucloud_nb
from gpucloud_nb import errors


def test_every_error_class_is_exported_from_the_package() -> None:
    classes = {name for name, value in vars(errors).items()
               if inspect.isclass(value) and issubclass(value, errors.GPUCloudError)}
    assert classes == set(errors.__all__) - {"RequestInfo"}
    assert classes <= set(gpucloud_nb.__all__)
    assert all(getattr(gpucloud_nb, name) is getattr(errors, name) for name in classes)


def test_the_drawn_tree_names_every_class_under_its_parent() -> None:
    """Each class in the docstring's tree sits under its real base class."""
    tree: list[tuple[int, str]] = []
    for text in (errors.__doc__ or "").splitlines():
        words = text.replace("│", " ").replace("├──", "   ").replace("└──", "   ").split()
        if words and words[0] in errors.__all__:
            tree.append((text.index(words[0]), words[0]))
    assert sorted(name for _, name in tree) == sorted(set(errors.__all__) - {"RequestInfo"})
    for position, (column, name) in enumerate(tree):
        above = [n for c, n in tree[:position] if c < column]
        cls = getattr(errors, name)
        if cls is errors.GPUCloudError:
            assert not above
            continue
        parent = next(b for b in cls.__mro__[1:] if b.__module__ == errors.__name__)
        assert above and above[-1] == parent.__name__, (name, parent.__name__)


def test_a_404_keeps_the_body_and_the_request(cloud, sandbox) -> None:
    with pytest.raises(errors.NotFoundError) as info:
        cloud.volumes.get("vol-nothing-here")
    error = info.value
    assert error.status_code == 404
    assert isinstance(error.body, dict) and error.body["statusCode"] == 404
    assert error.body["path"] == "/gpu-cloud/volumes/vol-nothing-here"
    assert error.request == errors.RequestInfo(
        "GET", f"{sandbox.management_url.rstrip('/')}/gpu-cloud/volumes/vol-nothing-here")


def test_the_key_never_shows_in_an_error(cloud, sandbox) -> None:
    # The sandbox echoes the id it did not find, in its message and path: here, the key itself.
    with pytest.raises(errors.NotFoundError) as info:
        cloud.volumes.get(sandbox.api_key)
    error = info.value
    echoed = str(error.body)
    assert "not found" in echoed.lower()
    shown = [str(error), repr(error), echoed, repr(error.request), str(vars(error))]
    assert all(sandbox.api_key not in text for text in shown), shown
    assert "x-api-key" not in repr(error.request).lower()


def test_a_kernel_that_cannot_start_is_an_error_of_the_tree() -> None:
    from gpucloud_nb.kernel import provisioner

    assert provisioner.KernelStartError is errors.KernelStartError
    assert gpucloud_nb.KernelStartError is errors.KernelStartError
    assert issubclass(errors.KernelStartError, errors.GPUCloudError)
