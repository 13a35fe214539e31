"""In IPython, the package's errors are one sentence; other errors keep their traceback."""

from __future__ import annotations

import pytest
from helpers import without_settings
from IPython.core.interactiveshell import InteractiveShell

from gpucloud_nb._notebook import install_error_display


@pytest.fixture
def shell():
    shell = InteractiveShell.instance()
    yield shell
    shell.set_custom_exc((), None)


def test_our_errors_are_one_sentence(shell, capsys) -> None:
    assert install_error_display(shell)
    shell.run_cell("from gpucloud_nb import GPUCloud\nGPUCloud(api_key='k', base_url='ftp://x')")
    captured = capsys.readouterr()
    assert captured.err.strip() == (
        "InvalidInputError: The base URL must start with http:// or https://, not 'ftp://x'.")
    assert "Traceback" not in captured.out + captured.err


def test_other_errors_keep_their_traceback(shell, capsys) -> None:
    install_error_display(shell)
    shell.run_cell("1/0")
    captured = capsys.readouterr()
    assert "ZeroDivisionError" in captured.out + captured.err
    assert "Traceback" in captured.out + captured.err


def test_someone_elses_handler_is_left_alone(shell) -> None:
    shell.set_custom_exc((KeyError,), lambda *a, **k: None)
    assert not install_error_display(shell)
    assert shell.custom_exceptions == (KeyError,)


def test_load_ext_installs_it(shell, capsys) -> None:
    shell.extension_manager.loaded.discard("gpucloud_nb")  # other tests share this shell
    shell.run_line_magic("load_ext", "gpucloud_nb")
    shell.run_cell("from gpucloud_nb.errors import NotFoundError\n"
                   "raise NotFoundError('Volume v1 not found.', status_code=404)")
    assert capsys.readouterr().err.strip() == "NotFoundError: Volume v1 not found."


def _in_fresh_shell(code: str, **env: str) -> str:
    """What ``code`` prints when run as a cell of a new IPython shell in a new process."""
    import subprocess
    import sys

    script = ("from IPython.core.interactiveshell import InteractiveShell\n"
              "shell = InteractiveShell.instance()\n"
              f"shell.run_cell({code!r}, store_history=False)\n"
              "print('handlers:', shell.custom_exceptions)\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=120, env=without_settings(**env))
    assert done.returncode == 0, done.stderr
    return done.stdout.strip().splitlines()[-1]


def test_importing_the_package_leaves_the_shell_alone() -> None:
    assert _in_fresh_shell("import gpucloud_nb") == "handlers: ()"


def test_the_first_connect_in_a_shell_installs_it() -> None:
    # A key set means the real cloud: connect() builds a client and, told to talk to the cloud
    # directly (no personal gateway to start), sends nothing.
    shown = _in_fresh_shell("import gpucloud_nb\ncloud = gpucloud_nb.connect(quiet=True)",
                            GPUCLOUD_API_KEY="k" * 20, GPUCLOUD_BASE_URL="http://127.0.0.1:9",
                            GPUCLOUD_GATEWAY="off")
    assert shown == "handlers: (<class 'gpucloud_nb.errors.GPUCloudError'>,)"
