"""In IPython and Jupyter, show this package's errors as one sentence, not a traceback.

Installed by ``%load_ext gpucloud_nb`` and by the first ``connect()`` inside IPython, never by
importing the package (an import changes nothing in the shell), and only if no other custom
exception handler is set. Other exceptions keep their usual traceback.

    In [1]: cloud.volumes.get("vol-123")
    NotFoundError: Volume vol-123 not found.
"""

from __future__ import annotations

import sys
from typing import Any

from gpucloud_nb.errors import GPUCloudError

__all__ = ["can_prompt", "install_error_display"]


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


def can_prompt() -> bool:
    """True when ``input()`` and ``getpass()`` can be answered here.

    In a Jupyter kernel that is when the front end accepts input (JupyterLab does; nbclient,
    nbmake and papermill do not, and asking there raises ``StdinNotImplementedError``); elsewhere
    when standard input is a terminal.

        >>> from gpucloud_nb import can_prompt
        >>> secret = getpass("Secret: ") if can_prompt() else os.environ["MY_SECRET"]  # doctest: +SKIP
    """
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None else None
    kernel = getattr(shell, "kernel", None)
    if kernel is not None:
        return bool(getattr(kernel, "_allow_stdin", False))
    return sys.stdin is not None and sys.stdin.isatty()
