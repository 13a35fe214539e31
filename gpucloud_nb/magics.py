"""The ``%gpucloud`` line magic: offers, instances, volumes, launch and chat from a notebook cell.

Load it once per kernel, then ask for help::

    %load_ext gpucloud_nb
    %gpucloud --help
    %gpucloud volumes --help

Subcommands (arguments are split like a shell line, so quote names with spaces):

``%gpucloud connect [--sandbox | --base-url URL]``
    Choose the cloud for this session. No option: ``connect()`` (the real cloud when
    ``GPUCLOUD_API_KEY`` is set, else the local sandbox). ``--sandbox``: the local sandbox.
    ``--base-url URL``: the cloud at URL, with the key from ``GPUCLOUD_API_KEY`` or typed into a
    hidden ``getpass`` prompt. A key is never accepted in the cell (``--api-key`` is refused):
    cells are saved in the notebook and in the history::

        %gpucloud connect --base-url https://api.example-gpu.cloud

``%gpucloud offers [--gpu NAME] [--gpus N] [--region R] [--type vm|container|baremetal] [--all]``
    Instance offers as a DataFrame, one row per offer and region, available rows only unless
    ``--all``; ``--gpu`` matches part of the GPU name::

        df = %gpucloud offers --gpu H100 --gpus 8 --region us-east-1 --type vm

``%gpucloud instances [--type vm|container|baremetal] [--all]``
    Your instances as a DataFrame, newest first; deleted ones only with ``--all``. Lists are
    shown as a person reads them (name first, ids last, dollars, local times; see
    :mod:`gpucloud_nb.tables`), while the DataFrame keeps the raw values::

        %gpucloud instances --type container

``%gpucloud instance INSTANCE``
    One instance in full (an ``InstanceDetails`` record: ``.status``, ``.ip``, ``.ssh_port``...).
    INSTANCE, here and below, is an instance's ``_id`` or its name (unique among the instances
    not deleted; see :mod:`gpucloud_nb.client.instances`)::

        details = %gpucloud instance 6650f0c2a1b2c3d4e5f60718

``%gpucloud delete INSTANCE [--yes]``
    Delete an instance, after a y/N confirmation unless ``--yes``; says which volumes keep its
    data::

        %gpucloud delete my-box --yes

``%gpucloud launch [OFFER_ID] [--provider ID]``
    The launch form, prefilled with the offer whose ``instanceId`` is OFFER_ID. Two providers
    may sell the same ``instanceId``: then ``--provider`` (a provider ``_id`` or name) says
    which, and without it the magic lists them::

        %gpucloud launch nimbus-h100-sxm5-1x-vm

``%gpucloud chat [ENDPOINT] [--model MODEL]``
    The chat widget. Without ENDPOINT, on the sandbox: its built-in model endpoint. With the URL
    of an inference instance, its secret is asked for with a hidden ``getpass`` prompt::

        %gpucloud chat https://abc123-9f8e.inference.example-gpu.cloud/

``%gpucloud kernel INSTANCE [--delete-on-shutdown] [--display-name NAME]``
    Install the kernelspec ``gpucloud-<name>`` whose kernel runs on the instance (INSTANCE is
    an id or a name; :func:`gpucloud_nb.kernel.install_kernel`), and say how to switch to it. With
    ``--delete-on-shutdown`` the instance is deleted when that kernel shuts down::

        %gpucloud kernel train-1

``%gpucloud spend [--all]``
    Spend so far as a DataFrame (``cloud.spend()``), shown with a total row; deleted instances
    are shown only with ``--all`` (the total counts them either way)::

        %gpucloud spend

``%gpucloud budget``
    Your budget through a class gateway (``cloud.gateway_status()``): spent, left, and the
    80 % warning or what was deleted when the budget was spent, as one sentence; off a gateway,
    one sentence saying there is none. ``%gpucloud instances`` shows the same warning. Then the
    budget of each instance not deleted (a create's ``budget=``), its spend and what is left
    (see :mod:`gpucloud_nb.magics_budget`)::

        %gpucloud budget

``%gpucloud volumes [list]``
    Your volumes as a DataFrame, newest first::

        vols = %gpucloud volumes

``%gpucloud volumes offers``
    Volume offers as a DataFrame: provider, minimum size, prices, regions::

        %gpucloud volumes offers

``%gpucloud volumes create NAME --size GB --region R [--provider ID]``
    Create a volume. ``--provider`` (a provider ``_id`` or display name) may be left out when one
    provider alone sells volumes in R::

        %gpucloud volumes create "my data" --size 100 --region us-east-1 --provider Nimbus

``%gpucloud volumes get ID``
    One volume (a ``Volume`` record)::

        %gpucloud volumes get 6650f0c2a1b2c3d4e5f60718

``%gpucloud volumes delete ID [--yes]``
    Delete a volume and its data, after a y/N confirmation unless ``--yes``; refused, with the
    instance named, while a pending, active or failed instance has it attached::

        %gpucloud volumes delete 6650f0c2a1b2c3d4e5f60718

``%%gpucloud run INSTANCE [--python]``, ``%gpucloud put/get``
    Run the cell on an instance over SSH (output streams in; interrupt stops it), copy files;
    INSTANCE is a name or an id (see :mod:`gpucloud_nb.magics_remote`)::

        %%gpucloud run my-instance
        nvidia-smi

Choices, written down once:

- Results are returned, so ``df = %gpucloud volumes`` works and a notebook displays them:
  DataFrames for lists, typed records (:mod:`gpucloud_nb.models`) for one resource, widgets for
  ``launch`` and ``chat``. ``create`` returns the new record and ``delete`` returns ``None``; both
  print one confirmation sentence.
- Everything the magic reports goes to stdout, except failures, which go to **stderr** (shown
  red in Jupyter): usage errors as one line ``%gpucloud ...: problem; try %gpucloud ... --help``,
  cloud errors (:class:`~gpucloud_nb.errors.GPUCloudError`) as their one sentence. Either way
  the magic returns ``None`` and never shows a traceback for a user error.
- ``--help`` prints the usage to stdout and returns ``None``.
- The session's client: the one given to :func:`use`, else the one ``%gpucloud connect`` made,
  else ``connect()`` on first use. :func:`current_cloud` returns it to Python code.
- A confirmation is ``y`` or ``yes`` (any case); any other answer cancels. Where no answer can
  be read (a non-interactive run), the delete is cancelled and ``--yes`` suggested.
- ``connect`` checks a new key with one cheap request (the volume list) before keeping the
  client, so a mistyped key is reported at once; the previous client stays in use on failure.
- Nothing printed or returned contains the API key or an inference secret: messages pass
  through :func:`gpucloud_nb._secrets.scrub`, and connect shows the key masked (``sk-…a1b2``).
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from IPython.core.magic import Magics, line_cell_magic, magics_class

from gpucloud_nb import magics_budget, magics_volumes
from gpucloud_nb._secrets import mask_url
from gpucloud_nb.client.management import GPUCloud
from gpucloud_nb.errors import GPUCloudError, NotFoundError
from gpucloud_nb.magics_client import current_cloud, replace, use
from gpucloud_nb.magics_output import ask_secret, confirm, label, say, warn
from gpucloud_nb.magics_parse import PROG, HelpShown, Stop, parse
from gpucloud_nb.models import InstanceDetails, InstanceOffer, Volume

if TYPE_CHECKING:
    import pandas
    from IPython.core.interactiveshell import InteractiveShell

__all__ = ["GPUCloudMagics", "current_cloud", "load_ipython_extension", "use"]

# --------------------------------------------------------------------------- the magics


@magics_class
class GPUCloudMagics(Magics):
    """The ``%gpucloud`` line magic; see the module docs for every subcommand."""

    @line_cell_magic
    def gpucloud(self, line: str = "", cell: str | None = None) -> Any:
        """Use the GPU cloud: ``%gpucloud --help`` lists the commands."""
        if line.split()[:1] in (["run"], ["put"], ["get"]) or cell is not None:
            return self._remote(line, cell)
        try:
            args = parse(line)
            handler: Callable[[argparse.Namespace], Any] = getattr(self, f"_{args.handler}")
            return handler(args)
        except HelpShown:
            return None
        except Stop as stop:
            if stop.message:
                warn(stop.message)
            return None
        except GPUCloudError as error:
            warn(str(error))
            return None

    @property
    def cloud(self) -> GPUCloud:
        """The session's client (see :func:`current_cloud`)."""
        return current_cloud()

    def _remote(self, line: str, cell: str | None) -> None:
        """``%%gpucloud run``, ``%gpucloud put/get`` (see :mod:`gpucloud_nb.magics_remote`)."""
        from gpucloud_nb.magics_remote import RemoteUsage, remote_magic

        try:
            if not line.strip():
                raise RemoteUsage("%%gpucloud needs a command: %%gpucloud run INSTANCE.")
            remote_magic(self.cloud, line, cell)
        except RemoteUsage as usage:
            warn(str(usage))
        except GPUCloudError as error:
            warn(str(error))

    # ------------------------------------------------------------------ connect, spend

    def _connect(self, args: argparse.Namespace) -> None:
        from gpucloud_nb._connect import connect

        if args.sandbox or args.base_url is None:
            cloud = connect(sandbox=True if args.sandbox else None, quiet=True)
            if cloud.is_sandbox:
                replace(cloud, owned=True)
                # The command's answer, every time (connect()'s banner shows once per kernel).
                say(f"Connected to the SANDBOX at {cloud.base_url}:\n  a simulated cloud on "
                     "this machine, no real GPUs, no charges.")
                return None
        else:
            if not args.base_url.startswith(("http://", "https://")):
                raise Stop(f"The base URL must start with http:// or https://, "
                            f"not {mask_url(args.base_url)!r}.")
            key = os.environ.get("GPUCLOUD_API_KEY") or ask_secret(
                f"API key for {mask_url(args.base_url)} (hidden): ")
            if not key:
                raise Stop("No API key was given; the session's cloud is unchanged.")
            cloud = GPUCloud(api_key=key, base_url=args.base_url)
        try:
            cloud.volumes.list()  # one cheap request: a wrong key or URL is reported now
        except GPUCloudError as error:
            cloud.close()
            raise Stop(f"{error} The session's cloud is unchanged.") from None
        replace(cloud, owned=True)
        say(f"Connected to the GPU cloud at {mask_url(cloud.base_url)} with key "
             f"{cloud.key_hint}.")
        return None

    def _spend(self, args: argparse.Namespace) -> pandas.DataFrame | None:
        return self.cloud.spend(include_deleted=args.all)

    # ------------------------------------------------------------------ offers, instances

    def _offers(self, args: argparse.Namespace) -> pandas.DataFrame:
        frame = self.cloud.instances.offers_frame(
            region=args.region, num_gpus=args.gpus, gpu_type=args.gpu,
            available=None if args.all else True, sort="price", deployment_type=args.type,
        )
        # The frame has a row per offer and region; keep the rows the filters asked for.
        if args.region is not None:
            frame = frame[frame["region"] == args.region]
        if not args.all:
            frame = frame[frame["available"]]
        return frame.reset_index(drop=True)

    def _instances(self, args: argparse.Namespace) -> pandas.DataFrame:
        from gpucloud_nb import frames

        instances = self.cloud.instances.list(deployment_type=args.type)
        if not args.all:
            instances = [i for i in instances if i.status != "deleted"]
        status = self.cloud.gateway_status()
        if status is not None and status.sentence():
            warn(status.sentence())
        return frames.instances_frame(instances)

    def _budget(self, args: argparse.Namespace) -> None:
        magics_budget.run(self.cloud)

    def _instance(self, args: argparse.Namespace) -> InstanceDetails:
        return self.cloud.instances.get(args.id)

    def _delete(self, args: argparse.Namespace) -> None:
        cloud = self.cloud
        instance = cloud.instances.get(args.id)
        shown = label(instance.name, instance.id)
        if instance.status in ("deleting", "deleted"):
            raise Stop(f"Instance {shown} is already {instance.status}.")
        fate = instance.data_fate(cloud.volumes.list())
        if not args.yes and not confirm(
            f"Delete instance {shown}? {fate[0].upper()}{fate[1:]}.",
            f"Could not ask for confirmation here; add --yes to delete instance {shown}.",
        ):
            say(f"Cancelled: instance {shown} was not deleted.")
            return None
        cloud.instances.delete(instance.id)
        say(f"Deleted instance {shown}; {fate}.")
        return None

    def _kernel(self, args: argparse.Namespace) -> str:
        from gpucloud_nb.kernel.spec import display_name_of, install_kernel

        name = install_kernel(
            self.cloud, args.instance, display_name=args.display_name,
            on_shutdown="delete" if args.delete_on_shutdown else "keep")

        fate = (" When that kernel shuts down, the instance is deleted."
                if args.delete_on_shutdown else "")
        say(f"Installed kernel {name}: choose Kernel → Change Kernel → "
             f"“{display_name_of(name)}” to run this notebook on the instance.{fate}")
        return name

    # ------------------------------------------------------------------ widgets

    def _launch(self, args: argparse.Namespace) -> Any:
        from gpucloud_nb.rules import find_offer
        from gpucloud_nb.widgets import LaunchForm

        cloud = self.cloud
        offer: InstanceOffer | None = None
        if args.offer is None and args.provider is not None:
            raise Stop(f"{PROG} launch: --provider needs an OFFER_ID; "
                        f"try {PROG} launch --help")
        if args.offer is not None:
            offers = cloud.instances.offers()
            if not any(o.instance_id == args.offer for o in offers):
                raise Stop(f"There is no offer with instanceId {args.offer!r}; "
                            "see %gpucloud offers --all.")
            offer = find_offer(offers, args.offer, args.provider, choose="--provider ID")
        form = LaunchForm(cloud, offer=offer)
        if args.budget is not None:
            form.fill(budget=args.budget)
        if args.idle is not None:
            form.fill(delete_when_idle=args.idle)
        if args.delete_after is not None:
            form.fill(delete_after=args.delete_after)
        return form

    def _chat(self, args: argparse.Namespace) -> Any:
        from gpucloud_nb.widgets.chat import ChatWidget

        if args.endpoint is None:
            cloud = self.cloud
            if not cloud.is_sandbox:
                raise Stop("On the real cloud, give the inference instance's URL: "
                            "%gpucloud chat https://<id>-<hash>.<domain>/ (its secret is asked "
                            "for, never typed in the cell).")
            client = cloud.sandbox_inference()
        else:
            if not args.endpoint.startswith(("http://", "https://")):
                # an inference instance of this account, by name or id (its key is the secret)
                try:
                    endpoint = self.cloud.inference_instances.chat_client(args.endpoint)
                except NotFoundError:
                    raise Stop(f"The endpoint must be a URL starting with http:// or https://, "
                               f"or the name of one of your inference instances, not "
                               f"{args.endpoint!r}.") from None
                return ChatWidget(endpoint, model=args.model)
            secret = ask_secret(f"Inference secret for {args.endpoint} (hidden): ")
            if not secret:
                raise Stop("No secret was given; the chat was not opened.")
            from gpucloud_nb.client.inference import InferenceClient

            client = InferenceClient(args.endpoint, secret)
        return ChatWidget(client, model=args.model)

    # ------------------------------------------------------------------ checkpoint, move

    def _session(self, args: argparse.Namespace) -> None:
        from gpucloud_nb import magics_move

        magics_move.run(args, say=say)

    # ------------------------------------------------------------------ endpoints

    def _endpoints(self, args: argparse.Namespace) -> Any:
        from gpucloud_nb import magics_endpoints

        return magics_endpoints.run(self.cloud, args, say=say, confirm=confirm, stop=Stop)

    def _ai_alias(self, args: argparse.Namespace) -> None:
        from gpucloud_nb import magics_ai

        magics_ai.run(self.cloud, args, self.shell, say=say, stop=Stop)
    # ------------------------------------------------------------------ volumes (magics_volumes)

    def _volumes_list(self, args: argparse.Namespace) -> pandas.DataFrame:
        return magics_volumes.list_volumes(self.cloud, args)

    def _volumes_offers(self, args: argparse.Namespace) -> pandas.DataFrame:
        return magics_volumes.offers(self.cloud, args)

    def _volumes_create(self, args: argparse.Namespace) -> Volume:
        return magics_volumes.create(self.cloud, args)

    def _volumes_get(self, args: argparse.Namespace) -> Volume:
        return magics_volumes.get(self.cloud, args)

    def _volumes_delete(self, args: argparse.Namespace) -> None:
        magics_volumes.delete(self.cloud, args)


def load_ipython_extension(ipython: InteractiveShell) -> None:
    """``%load_ext gpucloud_nb``: register the ``%gpucloud`` line and cell magic."""
    ipython.register_magics(GPUCloudMagics)
