"""``gpucloud-nb gateway --jupyterhub``: the gateway as a JupyterHub service, its options.

    # jupyterhub_config.py (the whole snippet is in docs/jupyterhub.md)
    c.JupyterHub.services = [{"name": "gpucloud", "url": "http://127.0.0.1:10101",
        "command": ["gpucloud-nb", "gateway", "--jupyterhub", "--budgets", "budgets.toml",
                    "--upstream", "https://cloud.example"],
        "environment": {"GPUCLOUD_UPSTREAM_API_KEY": "..."}}]

With ``--jupyterhub`` there is no keys file: people are the hub's users, told by their hub tokens
(:mod:`gpucloud_nb.gateway.hub`). ``--budgets FILE`` is the TOML budgets file
(:mod:`gpucloud_nb.gateway.hub_budgets`), ``--budget-default B`` the budget of anyone the file
gives none (dollars, ``-``, ``N/day``, ``N/week``), ``--teacher-group G`` a hub group whose
members are teachers (hub admins always are). The gateway listens where the hub's
``JUPYTERHUB_SERVICE_URL`` says unless ``--host``/``--port`` say otherwise. Without
``JUPYTERHUB_API_URL`` and ``JUPYTERHUB_API_TOKEN`` (that is, not started by a hub) it says so in
one sentence and does not start.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from typing import Any

__all__ = ["add_arguments", "hub_options"]

_DEFAULT_HOST, _DEFAULT_PORT = "127.0.0.1", 8790


def add_arguments(parser: Any) -> None:
    """Add the hub's options to the ``gateway`` command's ``parser``."""
    parser.add_argument("--jupyterhub", action="store_true",
                        help="serve as a JupyterHub service: hub tokens are the keys, hub admins "
                             "(and --teacher-group) are teachers (see docs/jupyterhub.md)")
    parser.add_argument("--budgets", metavar="FILE", default=None,
                        help="with --jupyterhub: the TOML budgets file (default, [groups], "
                             "[users])")
    parser.add_argument("--budget-default", metavar="B", default=None,
                        help="with --jupyterhub: the budget of anyone the budgets file gives "
                             "none ('10', '10/day', '-')")
    parser.add_argument("--teacher-group", metavar="GROUP", default=None,
                        help="with --jupyterhub: members of this hub group are teachers")


def hub_options(args: argparse.Namespace, env: Mapping[str, str]) -> dict[str, Any]:
    """The :class:`~gpucloud_nb.gateway.config.GatewayConfig` fields of a hub's gateway.

    Raises :class:`ValueError` (one sentence) for a missing hub environment or a bad budgets file.
    """
    from gpucloud_nb.gateway.hub import HubSettings
    from gpucloud_nb.gateway.hub_budgets import read_budgets
    from gpucloud_nb.gateway.keys import KeysFileError

    if args.keys is not None:
        raise ValueError("--jupyterhub takes its people from the hub; give --budgets FILE, not "
                         "--keys.")
    settings = HubSettings.from_env(env)
    try:
        budgets = read_budgets(args.budgets, default=args.budget_default,
                               teacher_group=args.teacher_group)
    except KeysFileError as error:
        raise ValueError(str(error).rstrip(".")) from None
    host, port = args.host, args.port
    bind = settings.bind
    if bind is not None and (host, port) == (_DEFAULT_HOST, _DEFAULT_PORT):
        host, port = bind
    return {"hub": settings, "hub_budgets": budgets, "host": host, "port": port}
