"""IPython and Jupyter helpers: errors shown as one sentence, and a lesson's inference client.

The error display is installed when ``gpucloud_nb`` is imported inside IPython (and by
``%load_ext gpucloud_nb``), only if no other custom exception handler is set. Other exceptions
keep their usual traceback.

    In [1]: cloud.volumes.get("vol-123")
    NotFoundError: Volume vol-123 not found.

:func:`notebook_inference` gives lessons 05 and 06 their inference client without ever blocking
on a prompt nobody can answer.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from gpucloud_nb.errors import GPUCloudError

__all__ = ["frontend_can_answer", "install_error_display", "notebook_inference"]


def _show_error(shell: Any, etype: type[BaseException], value: BaseException, tb: Any,
                tb_offset: int | None = None) -> None:
    print(f"{etype.__name__}: {value}", file=sys.stderr)


def install_error_display(shell: Any = None) -> bool:
    """Make ``shell`` (default: the running IPython) print our errors as one line. True if set."""
    if shell is None:
        ipython = sys.modules.get("IPython")
        shell = ipython.get_ipython() if ipython is not None else None
    if shell is None or not hasattr(shell, "set_custom_exc"):
        return False
    current = tuple(getattr(shell, "custom_exceptions", ()) or ())
    if current and current != (GPUCloudError,):
        return False  # someone else's handler: leave it alone
    shell.set_custom_exc((GPUCloudError,), _show_error)
    return True


def frontend_can_answer() -> bool:
    """True when ``input()`` and ``getpass`` can be answered: a kernel whose frontend allows stdin
    (not nbclient or nbmake), or a terminal."""
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None else None
    kernel = getattr(shell, "kernel", None)
    if kernel is not None:
        return bool(getattr(kernel, "_allow_stdin", False))
    stdin = sys.stdin
    return stdin is not None and stdin.isatty()


_NEEDS = ("Set GPUCLOUD_INFERENCE_URL and GPUCLOUD_INFERENCE_SECRET to your inference instance's "
          "address and secret to run the rest of this notebook; its cells are skipped.")


def _skip_cell(lines: list[str]) -> list[str]:
    if any("notebook_inference(" in line for line in lines):
        return lines  # the cell that asks again may run, and lift the skip
    return ["print('Skipped: no inference endpoint (see above).')\n"]


def notebook_inference(cloud: Any) -> Any:
    """An inference client for a lesson: the sandbox's, the environment's, or one asked for.

    On the sandbox, its built-in endpoint. Otherwise ``GPUCLOUD_INFERENCE_URL`` and
    ``GPUCLOUD_INFERENCE_SECRET`` when set; else the address with ``input()`` and the secret with
    ``getpass`` when the frontend can answer. Run unattended (nbclient, nbmake) with none of
    these, it prints one line saying what to set, returns ``None`` and skips the notebook's
    later cells rather than fail on a prompt nobody can answer.

        >>> chat = notebook_inference(connect())
    """
    from gpucloud_nb.client.inference import (
        SECRET_VARIABLE,
        URL_VARIABLE,
        InferenceClient,
    )

    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None else None
    transformers = getattr(shell, "input_transformers_cleanup", None)
    if transformers is not None and _skip_cell in transformers:
        transformers.remove(_skip_cell)
    if cloud.is_sandbox:
        return cloud.sandbox_inference()
    if os.environ.get(URL_VARIABLE, "").strip() and os.environ.get(SECRET_VARIABLE, "").strip():
        return InferenceClient()
    if frontend_can_answer():
        from getpass import getpass

        url = input("Address of your inference instance: ")
        return InferenceClient(url, getpass("Its secret (hidden): "))
    print(_NEEDS)
    if transformers is not None:
        transformers.append(_skip_cell)
    return None
