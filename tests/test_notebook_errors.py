"""In IPython, the package's errors are one sentence; other errors keep their traceback."""

from __future__ import annotations

import pytest
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
