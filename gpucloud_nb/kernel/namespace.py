"""A kernel's user namespace saved to one file and restored from it, in the kernel itself.

    >>> import os, tempfile, numpy
    >>> path = os.path.join(tempfile.mkdtemp(), "ns.gpucloud")
    >>> square = lambda x: x * x
    >>> saved = save({"a": numpy.arange(4), "square": square, "log": open(os.devnull)}, path)
    >>> saved.names, saved.skipped
    (['a', 'square'], {'log': 'an open file'})
    >>> restored = load(path)
    >>> restored.values["square"](restored.values["a"]).tolist()
    [0, 1, 4, 9]

Runs where the kernel runs (on the instance, or here for a checkpoint restored locally); it
needs cloudpickle, numpy only for arrays, torch only for tensors.

Choices (the issue leaves them open):

- **cloudpickle, not dill.** cloudpickle is what Dask, Ray and PySpark ship functions with: it
  pickles functions, classes and lambdas defined in the notebook (``__main__``) *by value*, and
  everything else with the standard pickler, so pickle protocol 5's out-of-band buffers
  (PEP 574) work unchanged. dill pickles more exotic objects (whole sessions, some frames), but
  reaches into interpreter internals and is slower on large data.
- **Names.** Every name of the user namespace that does not start with ``_`` and that IPython
  did not put there itself (``In``, ``Out``, ``exit``, ``get_ipython``...: the shell's hidden
  names are passed as ``hidden``). Modules are saved as their name and imported again on
  restore (``import numpy as np`` comes back as ``np``); a module that cannot be imported
  there is named.
- **One pickle per name.** Each name is pickled on its own, so one that cannot be moved is
  named with the reason and the others still go, and one that cannot be restored (its class's
  module is missing there) is named while the others arrive. Two names that shared one object
  arrive as two copies.
- **Functions and classes defined in the notebook** (``__module__ == "__main__"``) go by
  value but without the globals they read: restored, their globals are the namespace they are
  restored into, so a ``train()`` that appends to ``history`` appends to the restored
  ``history`` (cloudpickle alone would carry, and then use, copies of every global it reads).
- **What cannot be moved** is named with the reason: an open file, a socket, a generator, a
  thread, a lock, a live CUDA context; anything else that fails to pickle, with the error's
  first line.
- **Large data, copied once.** numpy arrays (and pandas' blocks, which are numpy arrays) go as
  protocol-5 out-of-band buffers: written to the file straight from the array's memory,
  64-byte aligned, and restored as arrays over one page-aligned buffer read from the file,
  never copied into a pickle first. A restored array is writable; the buffer is freed with its last array.
- **torch tensors** go to the CPU (as numpy buffers where the dtype allows, so out-of-band too)
  and back to the device they were on when that device exists there; otherwise they stay on the
  CPU and that is said.
- **File format.** ``GPUCLOUD-NS1\\n``, the manifest's length (8 bytes, little-endian), the
  manifest (JSON: per name its type, offsets and sizes), then the pickles and buffers.
"""

from __future__ import annotations

import io
import json
import mmap
import os
import pickle
import socket
import threading
import types
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpucloud_nb.errors import GPUCloudError

__all__ = ["MAGIC", "Loaded", "Prepared", "RestoreError", "load", "prepare", "save",
           "user_names"]

MAGIC = b"GPUCLOUD-NS1\n"
_ALIGN = 64
#: Names IPython puts in every user namespace; never saved (besides the shell's hidden names).
_IPYTHON_NAMES = frozenset({"In", "Out", "exit", "quit", "get_ipython"})


class RestoreError(GPUCloudError):
    """A namespace file could not be read at all (not one of ours, or cut short)."""


def user_names(namespace: Mapping[str, Any], hidden: Iterable[str] = ()) -> list[str]:
    """The names of ``namespace`` a checkpoint saves (see the module docstring), sorted.

        >>> user_names({"x": 1, "_y": 2, "In": [], "z": 3}, hidden={"z"})
        ['x']
    """
    skip = set(hidden) | _IPYTHON_NAMES
    return sorted(name for name in namespace if not name.startswith("_") and name not in skip)


def _why_not(value: Any) -> str | None:
    """Why ``value`` cannot be moved, when its kind says so before trying."""
    if isinstance(value, io.IOBase) and not isinstance(value, (io.BytesIO, io.StringIO)):
        return "an open file"
    if isinstance(value, socket.socket):
        return "a socket"
    if isinstance(value, (types.GeneratorType, types.AsyncGeneratorType, types.CoroutineType)):
        return "a generator"
    if isinstance(value, threading.Thread):
        return "a thread"
    if isinstance(value, (type(threading.Lock()), type(threading.RLock()))):
        return "a lock"
    kind = type(value)
    if kind.__module__.startswith(("torch.cuda", "cupy.cuda")):
        return "a live CUDA context"
    return None


def _tensor(array: Any, device: str, requires_grad: bool) -> Any:
    """A torch tensor rebuilt from ``array`` (numpy, or a CPU tensor), on ``device`` if it
    exists here (else on the CPU, as :data:`_DEVICES_MISSING` records)."""
    import torch

    tensor = torch.from_numpy(array) if not isinstance(array, torch.Tensor) else array
    if device != "cpu":
        try:
            tensor = tensor.to(device)
        except (RuntimeError, AssertionError):  # no such device here: stays on the CPU
            _DEVICES_MISSING.add(device)
    if requires_grad:
        tensor.requires_grad_(True)
    return tensor


#: Devices tensors were on that the restoring machine lacks (filled by :func:`_tensor`).
_DEVICES_MISSING: set[str] = set()
#: The namespace functions defined in the notebook are restored into (set by :func:`load`).
_GLOBALS: list[dict[str, Any]] = [{}]


def _notebook_function(code: types.CodeType, name: str, qualname: str, defaults: Any,
                       kwdefaults: Any, closure: Any, attributes: dict[str, Any],
                       annotations: dict[str, Any], doc: str | None) -> types.FunctionType:
    """A function defined in the notebook, rebuilt over the namespace it is restored into, so
    it reads and writes that namespace's names (not copies carried along with it)."""
    function = types.FunctionType(code, _GLOBALS[-1], name, defaults, closure)
    function.__qualname__, function.__kwdefaults__ = qualname, kwdefaults
    function.__dict__.update(attributes)
    function.__annotations__, function.__doc__ = annotations, doc
    function.__module__ = "__main__"
    return function


def _pickler_class() -> type:
    import cloudpickle

    class Pickler(cloudpickle.Pickler):
        """cloudpickle, with torch tensors sent to the CPU and numpy's buffers out of band."""

        def reducer_override(self, obj: Any) -> Any:
            kind = type(obj)
            if kind is types.FunctionType and obj.__module__ == "__main__":
                # Defined in the notebook: by value, but without the globals it reads (cloudpickle
                # would carry copies of them); it gets the restored namespace as its globals.
                return _notebook_function, (obj.__code__, obj.__name__, obj.__qualname__,
                                            obj.__defaults__, obj.__kwdefaults__, obj.__closure__,
                                            dict(obj.__dict__), dict(obj.__annotations__),
                                            obj.__doc__)
            if kind.__module__.startswith("torch") and kind.__name__ in ("Tensor", "Parameter"):
                import torch

                if isinstance(obj, torch.Tensor) and not obj.is_sparse:
                    cpu = obj.detach().cpu()
                    try:
                        payload: Any = cpu.numpy()  # out of band, as a numpy buffer
                    except (TypeError, RuntimeError):  # bfloat16 and friends: torch's own way
                        payload = cpu
                    return _tensor, (payload, str(obj.device), bool(obj.requires_grad))
            return super().reducer_override(obj)

    return Pickler


@dataclass
class _Entry:
    name: str
    kind: str  # "value" or "module"
    type: str
    data: bytes = b""
    buffers: list[memoryview] = field(default_factory=list)
    module: str = ""

    @property
    def size(self) -> int:
        return len(self.data) + sum(buffer.nbytes for buffer in self.buffers)


@dataclass
class Prepared:
    """A namespace pickled in memory (arrays still in place), ready to :meth:`write`."""

    entries: list[_Entry]
    skipped: dict[str, str]

    @property
    def names(self) -> list[str]:
        """The names that will be saved."""
        return [entry.name for entry in self.entries]

    @property
    def size(self) -> int:
        """Bytes the file will hold, about."""
        return sum(entry.size for entry in self.entries) + 4096

    def sizes(self) -> dict[str, int]:
        """Bytes per name."""
        return {entry.name: entry.size for entry in self.entries}

    def write(self, path: str | os.PathLike[str]) -> int:
        """Write the file (to a temporary name, renamed when complete); its size."""
        manifest: dict[str, Any] = {"version": 1, "skipped": self.skipped, "names": []}
        offset = 0
        for entry in self.entries:
            record: dict[str, Any] = {"name": entry.name, "kind": entry.kind,
                                      "type": entry.type, "module": entry.module}
            record["data"] = [offset, len(entry.data)]
            offset += len(entry.data)
            spans = []
            for buffer in entry.buffers:
                offset += -offset % _ALIGN
                spans.append([offset, buffer.nbytes])
                offset += buffer.nbytes
            record["buffers"] = spans
            manifest["names"].append(record)
        head = json.dumps(manifest).encode()
        start = len(MAGIC) + 8 + len(head)
        start += -start % _ALIGN
        target = Path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        partial = target.with_name(f".{target.name}.partial")
        with open(partial, "wb") as file:
            file.write(MAGIC + len(head).to_bytes(8, "little") + head)
            file.write(b"\0" * (start - file.tell()))
            for entry in self.entries:
                file.write(entry.data)
                for buffer in entry.buffers:
                    file.write(b"\0" * (-(file.tell() - start) % _ALIGN))
                    file.write(buffer)  # straight from the array's memory
            size = file.tell()
        os.replace(partial, target)
        return size


def prepare(namespace: Mapping[str, Any], hidden: Iterable[str] = ()) -> Prepared:
    """Pickle each saved name of ``namespace`` (arrays by reference, out of band)."""
    pickler = _pickler_class()
    entries: list[_Entry] = []
    skipped: dict[str, str] = {}
    for name in user_names(namespace, hidden):
        value = namespace[name]
        kind = f"{type(value).__module__}.{type(value).__qualname__}"
        if isinstance(value, types.ModuleType):
            entries.append(_Entry(name, "module", "module", module=value.__name__))
            continue
        reason = _why_not(value)
        if reason is not None:
            skipped[name] = reason
            continue
        buffers: list[pickle.PickleBuffer] = []
        out = io.BytesIO()
        try:
            pickler(out, protocol=5, buffer_callback=buffers.append).dump(value)
            views = [buffer.raw() for buffer in buffers]
        except Exception as error:
            skipped[name] = _reason(value, error)
            continue
        entries.append(_Entry(name, "value", kind, out.getvalue(), views))
    return Prepared(entries, skipped)


def _reason(value: Any, error: BaseException) -> str:
    """What a failed pickle says, in a few words (a thing inside ``value`` may be the cause)."""
    text = str(error).splitlines()[0] if str(error) else type(error).__name__
    for word, reason in (("file", "it holds an open file"), ("socket", "it holds a socket"),
                         ("generator", "it holds a generator"),
                         ("thread", "it holds a thread or lock"),
                         ("lock", "it holds a thread or lock")):
        if word in text.lower():
            return reason
    return f"{type(value).__name__} cannot be pickled ({text[:120]})"


def save(namespace: Mapping[str, Any], path: str | os.PathLike[str],
         hidden: Iterable[str] = ()) -> Prepared:
    """Save ``namespace`` to ``path``; what was saved and what was not (see the module)."""
    prepared = prepare(namespace, hidden)
    prepared.write(path)
    return prepared


@dataclass
class Loaded:
    """What :func:`load` read: the values, and the names that could not be restored, why."""

    values: dict[str, Any]
    failed: dict[str, str]
    skipped: dict[str, str]
    sizes: dict[str, int]
    notes: list[str] = field(default_factory=list)


def read_manifest(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The manifest of a namespace file (names, sizes, what was skipped), without the data."""
    with open(path, "rb") as file:
        return _manifest(file, os.fspath(path))[0]


def _manifest(file: Any, label: str) -> tuple[dict[str, Any], int]:
    head = file.read(len(MAGIC) + 8)
    if not head.startswith(MAGIC) or len(head) < len(MAGIC) + 8:
        raise RestoreError(f"{label} is not a gpucloud-nb checkpoint.")
    length = int.from_bytes(head[len(MAGIC):], "little")
    try:
        manifest: dict[str, Any] = json.loads(file.read(length))
    except ValueError:
        raise RestoreError(f"{label} is cut short or damaged.") from None
    start = len(MAGIC) + 8 + length
    return manifest, start + (-start % _ALIGN)


def load(path: str | os.PathLike[str], *, into: dict[str, Any] | None = None,
         importer: Callable[[str], Any] | None = None) -> Loaded:
    """Read the namespace file ``path``: its values, and what could not be restored, why.

    Functions and classes defined in the notebook get ``into`` (the namespace the values are
    about to be put in; else a new one holding them) as their globals.
    """
    import builtins
    import importlib

    label = os.fspath(path)
    with open(path, "rb") as file:
        manifest, start = _manifest(file, label)
        file.seek(0, os.SEEK_END)
        size = file.tell() - start
        file.seek(start)
        # Page-aligned (an anonymous mapping), so every 64-byte-aligned buffer is aligned.
        data = mmap.mmap(-1, size) if size else bytearray()
        if size and file.readinto(data) != size:
            raise RestoreError(f"{label} is cut short or damaged.")
    view = memoryview(data)
    values: dict[str, Any] = {}
    failed: dict[str, str] = {}
    sizes: dict[str, int] = {}
    _DEVICES_MISSING.clear()
    target: dict[str, Any] = into if into is not None else {"__name__": "__main__"}
    target.setdefault("__builtins__", builtins)  # a function's globals need them
    _GLOBALS.append(target)
    try:
        _read_all(manifest, view, size, values, failed, sizes, importer or importlib.import_module)
    finally:
        _GLOBALS.pop()
    if into is None:
        target.update(values)
    notes = [f"tensors that were on {device} stay on the CPU: there is no {device} here"
             for device in sorted(_DEVICES_MISSING)]
    return Loaded(values, failed, dict(manifest.get("skipped") or {}), sizes, notes)


def _read_all(manifest: dict[str, Any], view: memoryview, size: int, values: dict[str, Any],
              failed: dict[str, str], sizes: dict[str, int],
              importer: Callable[[str], Any]) -> None:
    for record in manifest.get("names", []):
        name = str(record["name"])
        if record["kind"] == "module":
            try:
                values[name] = importer(record["module"])
            except Exception as error:
                failed[name] = f"module {record['module']} cannot be imported here ({error})"
            continue
        first, length = record["data"]
        buffers = [view[offset:offset + count] for offset, count in record["buffers"]]
        sizes[name] = length + sum(count for _, count in record["buffers"])
        if first + length > size or any(o + c > size for o, c in record["buffers"]):
            failed[name] = "the file is cut short"
            continue
        try:
            values[name] = pickle.loads(view[first:first + length], buffers=buffers)
        except Exception as error:
            text = str(error).splitlines()[0] if str(error) else type(error).__name__
            failed[name] = f"{type(error).__name__}: {text[:160]}"
