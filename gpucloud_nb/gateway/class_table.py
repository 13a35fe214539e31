"""``gpucloud-nb gateway class``: the teacher's view of a class gateway, as a table in a terminal.

    $ export GPUCLOUD_BASE_URL=http://127.0.0.1:8790 GPUCLOUD_API_KEY=...   # the teacher's key
    $ gpucloud-nb gateway class
    student  instances  $/h now  spend  budget      left    idle min  deletes not done
    Ada      1          $0.50    $0.01  $20.00/day  $19.99  12.5
    Bob      0          $0.00    $0.00
    $ gpucloud-nb gateway class --csv > class.csv

The teacher's key comes from ``GPUCLOUD_API_KEY``, or with ``--key-file FILE`` from the first
word of that file's first line that is not blank or a ``#`` comment; never from an argument (it
would be in the shell's history and in ``ps``). The gateway is ``--url URL``, else
``GPUCLOUD_BASE_URL``. A student's key, a missing key or URL, or a
server that does not answer is one sentence on stderr and exit status 1 (2 for a usage error).
"""

from __future__ import annotations

import argparse
import os
import sys

from gpucloud_nb.client.teacher import AccountUse

__all__ = ["format_table", "run"]

_HEADERS = ("student", "instances", "$/h now", "spend", "budget", "left", "deletes not done")


def format_table(rows: list[AccountUse]) -> str:
    """``rows`` as aligned text columns with a header (dollars formatted, no keys).

        >>> print(format_table([AccountUse("a1", "Ada", 1, 0.5, 0.25, 20.0, 19.75, None, "day")]))
        student  instances  $/h now  spend  budget      left    deletes not done
        Ada      1          $0.50    $0.25  $20.00/day  $19.75

    Rows of a hub's gateway (:mod:`gpucloud_nb.gateway.hub_people`) start with their hub group;
    ``idle min`` (how long the idlest instance the gateway watches for idle has been idle) comes
    before the last column when any row has a figure.
    """
    from gpucloud_nb.display import format_price

    grouped = any(row.group for row in rows)  # a hub's gateway: the hub group first
    idle = any(row.idle_minutes is not None for row in rows)
    lines = [(["group"] if grouped else []) + list(_HEADERS[:-1])
             + (["idle min"] if idle else []) + [_HEADERS[-1]]]
    for row in rows:
        budget = "" if row.budget is None else format_price(row.budget) + (
            f"/{row.period}" if row.period else "")
        minutes = [] if not idle else ["" if row.idle_minutes is None else f"{row.idle_minutes:g}"]
        lines.append(([row.group] if grouped else []) + [
            row.name, str(row.instances), format_price(row.per_hour),
            format_price(row.spend), budget, format_price(row.left), *minutes,
            str(row.unconfirmed_deletes) if row.unconfirmed_deletes else ""])
    widths = [max(len(line[n]) for line in lines) for n in range(len(lines[0]))]
    return "\n".join("  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True))
                     .rstrip() for line in lines)


def _key(key_file: str | None) -> str:
    if key_file is None:
        key = os.environ.get("GPUCLOUD_API_KEY", "").strip()
        if not key:
            raise ValueError("set GPUCLOUD_API_KEY to the teacher's key, or give --key-file FILE "
                             "(the key is never an argument).")
        return key
    try:
        with open(key_file, encoding="utf-8") as file:
            lines = [line.split() for line in file if line.strip()
                     and not line.lstrip().startswith("#")]
    except (OSError, UnicodeDecodeError) as error:
        reason = getattr(error, "strerror", None) or "not UTF-8 text"
        raise ValueError(f"cannot read the key file {key_file}: {reason}.") from None
    if not lines:
        raise ValueError(f"the key file {key_file} holds no key.")
    return lines[0][0]


def run(args: argparse.Namespace) -> int:
    """Print the class of ``args.url`` (or ``GPUCLOUD_BASE_URL``); the exit status."""
    from gpucloud_nb import GPUCloud
    from gpucloud_nb.errors import GPUCloudError

    def fail(message: str, status: int = 1) -> int:
        print(f"gpucloud-nb gateway class: error: {message}", file=sys.stderr)
        return status

    if len(args.words) > 1:
        return fail("`gateway class` takes no other words; the key comes from GPUCLOUD_API_KEY "
                    "or --key-file.", 2)
    url = args.url or os.environ.get("GPUCLOUD_BASE_URL", "")
    if not url.startswith(("http://", "https://")):
        return fail("give the gateway's URL with --url or GPUCLOUD_BASE_URL (http:// or "
                    "https://).", 2)
    try:
        key = _key(args.key_file)
    except ValueError as error:
        return fail(str(error), 2)
    try:
        with GPUCloud(api_key=key, base_url=url, max_retries=1, timeout=30.0) as teacher:
            view = teacher.class_view
            text = view.export_csv() if args.csv else format_table(view.accounts())
    except GPUCloudError as error:
        return fail(str(error))
    print(text.rstrip("\n"))
    return 0
