"""Mark every docstring example that does not run with ``# doctest: +SKIP`` (run once, by hand).

Examples that need a cloud or a notebook are illustration; this finds them by running each one
(on loopback only: tests/test_doctests.py's guard) and appends the directive to its first line.
"""

from __future__ import annotations

import doctest
import importlib
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
import test_doctests


class _Recorder(doctest.DocTestRunner):
    def __init__(self) -> None:
        super().__init__(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
        self.bad: list[tuple[doctest.DocTest, doctest.Example]] = []

    def report_failure(self, out, test, example, got):  # type: ignore[no-untyped-def]
        self.bad.append((test, example))

    def report_unexpected_exception(self, out, test, example, exc_info):  # type: ignore[no-untyped-def]
        self.bad.append((test, example))


def main() -> None:
    marks: dict[str, set[int]] = {}
    for name in test_doctests._modules():
        module = importlib.import_module(name)
        runner = _Recorder()
        with test_doctests.loopback_only():
            for test in doctest.DocTestFinder(exclude_empty=True).find(module, name,
                                                                        globs=dict(vars(module))):
                runner.run(test, out=lambda _t: None)
        for test, example in runner.bad:
            if test.lineno is None or test.filename is None:
                continue
            marks.setdefault(test.filename, set()).add(test.lineno + example.lineno)
    for filename, lines in marks.items():
        path = Path(filename)
        text = path.read_text(encoding="utf-8").split("\n")
        for number in sorted(lines):  # 0-based docstring line + example offset = file line index
            line = text[number]
            if ">>>" in line and "doctest:" not in line:
                text[number] = f"{line}  # doctest: +SKIP"
        path.write_text("\n".join(text), encoding="utf-8")
        print(f"{path}: {len(lines)} example(s) marked")


if __name__ == "__main__":
    main()
