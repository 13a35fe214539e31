"""The ``nvidia-smi`` command of sandbox instances, with what the instance's processes really do.

    $ nvidia-smi --query-gpu=utilization.gpu,memory.used --format=csv,noheader,nounits
    57, 1210

A sandbox has no GPU, so the instance's process tree stands for it: the service measures the CPU
share of every process the instance's SSH sessions started, and their resident memory (see
:mod:`gpucloud_nb.sandbox.gpu_use`), and writes it beside this command each time it measures
(about once a second). A busy loop is then a busy GPU, and an instance doing nothing shows 0 %.

Choices (nvidia-smi's own behaviour where it has one):

- One busy core is one fully used GPU: the share fills the GPUs in order (150 % of a core on a
  two-GPU instance is GPU 0 at 100 % and GPU 1 at 50 %). The memory used is all on GPU 0
  (capped at its size), as one process's would be.
- ``--query-gpu=FIELDS --format=csv[,noheader][,nounits]`` as nvidia-smi: a header line of
  ``field [unit]`` names, then one line per GPU of values joined by ``", "``. Fields:
  ``index``, ``name``, ``count``, ``uuid``, ``utilization.gpu``, ``memory.used``,
  ``memory.total``, ``memory.free``. Another field is nvidia-smi's own error
  (``Field "x" is not a valid field to query.``), exit status 2; a query without ``--format``
  is refused the same way.
- ``-L`` lists the GPUs; no option prints the table, with the measured use in it.

This file runs as a script on the instance (``python -SI nvidia_smi.py STATE [ARGS]``), so it
imports nothing but the standard library and starts in a few milliseconds: the command's own
CPU must not make an idle instance look busy.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

__all__ = ["FIELDS", "gpus", "main", "query", "table"]

#: The fields ``--query-gpu`` knows, with the unit nvidia-smi writes in headers and values.
FIELDS: dict[str, str] = {
    "index": "", "name": "", "count": "", "uuid": "",
    "utilization.gpu": "%", "memory.used": "MiB", "memory.total": "MiB", "memory.free": "MiB",
}


def gpus(state: dict[str, Any]) -> list[dict[str, Any]]:
    """Each GPU's row from a state (``model``, ``count``, ``mib``, ``util``, ``memoryMiB``).

        >>> [g["utilization.gpu"] for g in gpus({"count": 2, "util": 150, "mib": 80})]
        [100, 50]
    """
    count = max(int(state.get("count") or 1), 1)
    total = max(int(state.get("mib") or 0), 0)
    share = max(float(state.get("util") or 0.0), 0.0)
    used = min(max(round(float(state.get("memoryMiB") or 0.0)), 0), total) if total else 0
    rows = []
    for index in range(count):
        util = round(min(max(share - 100 * index, 0.0), 100.0))
        mine = used if index == 0 else 0
        rows.append({
            "index": index, "name": f"NVIDIA {state.get('model') or 'GPU'}", "count": count,
            "uuid": f"GPU-00000000-0000-0000-0000-{index:012d}", "utilization.gpu": util,
            "memory.used": mine, "memory.total": total, "memory.free": total - mine,
        })
    return rows


def query(state: dict[str, Any], fields: list[str], options: list[str]) -> str:
    """What ``--query-gpu=FIELDS --format=csv,OPTIONS`` prints (ValueError for a bad field).

        >>> print(query({"count": 1, "util": 57.2, "memoryMiB": 1210, "mib": 81920},
        ...             ["utilization.gpu", "memory.used"], ["noheader", "nounits"]), end="")
        57, 1210
    """
    for name in fields:
        if name not in FIELDS:
            raise ValueError(f'Field "{name}" is not a valid field to query.')
    units = "nounits" not in options
    lines = []
    if "noheader" not in options:
        lines.append(", ".join(f"{n} [{FIELDS[n]}]" if FIELDS[n] else n for n in fields))
    for gpu in gpus(state):
        values = [f"{gpu[n]} {FIELDS[n]}" if units and FIELDS[n] else str(gpu[n]) for n in fields]
        lines.append(", ".join(values))
    return "\n".join(lines) + "\n"


def table(state: dict[str, Any]) -> str:
    """What ``nvidia-smi`` prints: the GPUs in nvidia-smi's table layout, with their use."""
    stamp = time.strftime("%a %b %d %H:%M:%S %Y")
    rule = "+-----------------------------------------+------------------------+----------------------+"
    lines = [
        stamp,
        rule,
        "| NVIDIA-SMI 550.54.15 (gpucloud-nb sandbox) Driver Version: 550.54.15  CUDA Version: 12.4 |",
        "|-----------------------------------------+------------------------+----------------------+",
        "| GPU  Name                 Persistence-M | Bus-Id          Disp.A | Volatile Uncorr. ECC |",
        "| Fan  Temp   Perf          Pwr:Usage/Cap |           Memory-Usage | GPU-Util  Compute M. |",
        "|=========================================+========================+======================|",
    ]
    for gpu in gpus(state):
        index = gpu["index"]
        memory = f"{gpu['memory.used']}MiB / {gpu['memory.total']}MiB"
        util = f"{gpu['utilization.gpu']}%"
        lines += [
            f"| {index:>3}  {gpu['name'][:26]:<26}     On  |   00000000:{index + 1:02X}:00.0 Off |"
            "                    0 |",
            f"| N/A   34C    P0             70W /  700W | {memory:>22} | {util:>6}      Default |",
            rule,
        ]
    lines += [
        "",
        "+-----------------------------------------------------------------------------------------+",
        "| Processes:                                                                              |",
        "|  GPU   GI   CI        PID   Type   Process name                              GPU Memory |",
        "|=========================================================================================|",
        "|  No running processes found                                                             |",
        "+-----------------------------------------------------------------------------------------+",
    ]
    return "\n".join(lines) + "\n"


def _option(args: list[str], name: str) -> str | None:
    """The value of ``--name=V`` or ``--name V`` in ``args``."""
    for index, arg in enumerate(args):
        if arg.startswith(f"{name}="):
            return arg.split("=", 1)[1]
        if arg == name and index + 1 < len(args):
            return args[index + 1]
    return None


def run(state: dict[str, Any], args: list[str]) -> tuple[str, str, int]:
    """``(stdout, stderr, exit status)`` of ``nvidia-smi ARGS`` on an instance in ``state``."""
    if any(a in ("-h", "--help") for a in args):
        return ("nvidia-smi (gpucloud-nb sandbox): [-L] [--query-gpu=FIELDS "
                "--format=csv[,noheader][,nounits]]\n", "", 0)
    if any(a in ("-L", "--list-gpus") for a in args):
        return ("".join(f"GPU {g['index']}: {g['name']} (UUID: {g['uuid']})\n"
                        for g in gpus(state)), "", 0)
    fields = _option(args, "--query-gpu")
    if fields is None:
        return table(state), "", 0
    form = _option(args, "--format")
    options = [] if form is None else [part.strip() for part in form.split(",")]
    if not options or options[0] != "csv":
        return "", 'Option "--format=csv" is required with --query-gpu.\n', 2
    try:
        return query(state, [f.strip() for f in fields.split(",") if f.strip()], options[1:]), "", 0
    except ValueError as error:
        return "", f"{error}\n", 2


def main(argv: list[str]) -> int:
    """``nvidia_smi.py STATE [ARGS]``: print what ``nvidia-smi ARGS`` would."""
    try:
        with open(argv[0], encoding="utf-8") as file:
            state = json.load(file)
    except (IndexError, OSError, ValueError):
        state = {}
    out, err, status = run(state if isinstance(state, dict) else {}, argv[1:])
    sys.stdout.write(out)
    sys.stderr.write(err)
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
