"""The exception hierarchy: one tree, every class exported, the tree in the docs matches."""

from __future__ import annotations

import inspect

import gpucloud_nb
from gpucloud_nb import errors


def test_every_error_class_is_exported_from_the_package() -> None:
    classes = {name for name, value in vars(errors).items()
               if inspect.isclass(value) and issubclass(value, errors.GPUCloudError)}
    assert classes == set(errors.__all__)
    assert classes <= set(gpucloud_nb.__all__)
    assert all(getattr(gpucloud_nb, name) is getattr(errors, name) for name in classes)


def test_the_drawn_tree_names_every_class_under_its_parent() -> None:
    """Each class in the docstring's tree sits under its real base class."""
    tree: list[tuple[int, str]] = []
    for text in (errors.__doc__ or "").splitlines():
        words = text.replace("│", " ").replace("├──", "   ").replace("└──", "   ").split()
        if words and words[0] in errors.__all__:
            tree.append((text.index(words[0]), words[0]))
    assert sorted(name for _, name in tree) == sorted(errors.__all__)
    for position, (column, name) in enumerate(tree):
        above = [n for c, n in tree[:position] if c < column]
        cls = getattr(errors, name)
        if cls is errors.GPUCloudError:
            assert not above
            continue
        parent = next(b for b in cls.__mro__[1:] if b.__module__ == errors.__name__)
        assert above and above[-1] == parent.__name__, (name, parent.__name__)
