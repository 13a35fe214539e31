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
    one sentence saying there is none. ``%gpucloud instances`` shows the same warning::

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
import getpass
import math
import os
import sys
import unicodedata
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

from IPython.core.magic import Magics, line_cell_magic, magics_class

from gpucloud_nb._secrets import mask_url, scrub
from gpucloud_nb.client.management import GPUCloud
from gpucloud_nb.display import format_price
from gpucloud_nb.errors import BadRequestError, GPUCloudError, InvalidInputError, NotFoundError
from gpucloud_nb.magics_parse import PROG, HelpShown, Stop, parse
from gpucloud_nb.models import InstanceDetails, InstanceOffer, Volume, VolumeOffer

if TYPE_CHECKING:
    import pandas
    from IPython.core.interactiveshell import InteractiveShell

__all__ = ["GPUCloudMagics", "current_cloud", "load_ipython_extension", "use"]

#: Instance statuses that still hold their volumes (the sandbox refuses a delete then).
HOLDING_STATUSES = ("pending", "active", "error")

_session: dict[str, Any] = {"cloud": None, "owned": False}


# --------------------------------------------------------------------------- session client


def use(cloud: GPUCloud | None) -> None:
    """Make ``%gpucloud`` use ``cloud`` from now on; ``None`` forgets it (next use connects).

        >>> import gpucloud_nb.magics
        >>> gpucloud_nb.magics.use(GPUCloud(api_key=..., base_url=...))  # doctest: +SKIP
    """
    _replace(cloud, owned=False)


def current_cloud() -> GPUCloud:
    """The client ``%gpucloud`` uses, connecting with ``connect()`` on first use.

        >>> cloud = gpucloud_nb.magics.current_cloud()  # doctest: +SKIP
    """
    if _session["cloud"] is None:
        from gpucloud_nb._connect import connect

        _replace(connect(), owned=True)
    return _session["cloud"]


def _replace(cloud: GPUCloud | None, *, owned: bool) -> None:
    old, old_owned = _session["cloud"], _session["owned"]
    if old is not None and old is not cloud and old_owned and hasattr(old, "close"):
        old.close()
    _session["cloud"], _session["owned"] = cloud, owned


# --------------------------------------------------------------------------- output


#: Unicode categories shown escaped: controls, format characters (bidi overrides such as U+202E,
#: zero-width marks), surrogates, private use, and line/paragraph separators.
_HIDDEN_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Co", "Zl", "Zp"})


def _printable(text: str) -> str:
    """``text`` with control and bidi characters written as escapes (``\\u202e``).

    A name from the server holding a right-to-left override would otherwise reorder the rest of
    the line it is printed in (``evil\\u202etxt.exe`` shows as ``evilexe.txt``).
    """
    if text.isascii() and text.isprintable():
        return text
    out = []
    for ch in text:
        if ch != "\n" and unicodedata.category(ch) in _HIDDEN_CATEGORIES:
            code = ord(ch)
            out.append(f"\\x{code:02x}" if code < 0x100 else
                       f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}")
        else:
            out.append(ch)
    return "".join(out)


def _clean(text: str, *secrets: str) -> str:
    """Mask the secrets the session's client holds, and ``secrets`` (asked for in this call);
    control and bidi characters are written as escapes (see :func:`_printable`)."""
    cloud = _session["cloud"]
    text = cloud.scrub(text) if cloud is not None else text
    return _printable(scrub(text, *secrets))


def _say(text: str) -> None:
    """Report to stdout (confirmations, cancellations)."""
    print(_clean(text), flush=True)


def _warn(text: str) -> None:
    """Report a failure to stderr, on one line (shown red in Jupyter)."""
    print(_clean(" ".join(text.splitlines())), file=sys.stderr, flush=True)


# --------------------------------------------------------------------------- helpers


def _confirm(question: str, refusal: str) -> bool:
    """Ask a y/N question with ``input()``; True only for y or yes."""
    try:
        answer = input(f"{_clean(question)} [y/N] ")
    except (EOFError, NotImplementedError):
        # No stdin (a non-interactive run, or a frontend without input support).
        raise Stop(refusal) from None
    return answer.strip().lower() in ("y", "yes")


def _ask_secret(prompt: str) -> str:
    """Read a secret with a hidden ``getpass`` prompt; never echoed, never in the cell."""
    try:
        value = getpass.getpass(prompt)
    except (EOFError, NotImplementedError):
        raise Stop("No secret could be asked for here (no input is possible in this run).") from None
    return (value or "").strip()


def _label(name: str, id: str) -> str:
    return f"{name} ({id})" if name and name != id else id


def _gb(size: float) -> str:
    return f"{size:g} GB"


def _names(items: Iterable[str]) -> str:
    return ", ".join(items) or "none"


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
                _warn(stop.message)
            return None
        except GPUCloudError as error:
            _warn(str(error))
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
            _warn(str(usage))
        except GPUCloudError as error:
            _warn(str(error))

    # ------------------------------------------------------------------ connect, spend

    def _connect(self, args: argparse.Namespace) -> None:
        from gpucloud_nb._connect import connect

        if args.sandbox or args.base_url is None:
            cloud = connect(sandbox=True if args.sandbox else None, quiet=True)
            if cloud.is_sandbox:
                _replace(cloud, owned=True)
                # The command's answer, every time (connect()'s banner shows once per kernel).
                _say(f"Connected to the SANDBOX at {cloud.base_url}:\n  a simulated cloud on "
                     "this machine, no real GPUs, no charges.")
                return None
        else:
            if not args.base_url.startswith(("http://", "https://")):
                raise Stop(f"The base URL must start with http:// or https://, "
                            f"not {mask_url(args.base_url)!r}.")
            key = os.environ.get("GPUCLOUD_API_KEY") or _ask_secret(
                f"API key for {mask_url(args.base_url)} (hidden): ")
            if not key:
                raise Stop("No API key was given; the session's cloud is unchanged.")
            cloud = GPUCloud(api_key=key, base_url=args.base_url)
        try:
            cloud.volumes.list()  # one cheap request: a wrong key or URL is reported now
        except GPUCloudError as error:
            cloud.close()
            raise Stop(f"{error} The session's cloud is unchanged.") from None
        _replace(cloud, owned=True)
        _say(f"Connected to the GPU cloud at {mask_url(cloud.base_url)} with key "
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
            _warn(status.sentence())
        return frames.instances_frame(instances)

    def _budget(self, args: argparse.Namespace) -> None:
        status = self.cloud.gateway_status()
        if status is None:
            raise Stop("This cloud is not a class gateway, so it keeps no budget for your key; "
                       "see %gpucloud spend.")
        if status.budget is None or status.left is None:
            _say(f"{status.name}: {format_price(status.spend)} spent; your key has no budget.")
            return None
        _say(f"{status.name}: {format_price(status.spend)} spent of your budget of "
             f"{format_price(status.budget)}; {format_price(status.left)} left.")
        if status.sentence():
            _warn(status.sentence())
        return None

    def _instance(self, args: argparse.Namespace) -> InstanceDetails:
        return self.cloud.instances.get(args.id)

    def _delete(self, args: argparse.Namespace) -> None:
        cloud = self.cloud
        instance = cloud.instances.get(args.id)
        label = _label(instance.name, instance.id)
        if instance.status in ("deleting", "deleted"):
            raise Stop(f"Instance {label} is already {instance.status}.")
        fate = instance.data_fate(cloud.volumes.list())
        if not args.yes and not _confirm(
            f"Delete instance {label}? {fate[0].upper()}{fate[1:]}.",
            f"Could not ask for confirmation here; add --yes to delete instance {label}.",
        ):
            _say(f"Cancelled: instance {label} was not deleted.")
            return None
        cloud.instances.delete(instance.id)
        _say(f"Deleted instance {label}; {fate}.")
        return None

    def _kernel(self, args: argparse.Namespace) -> str:
        from gpucloud_nb.kernel.spec import display_name_of, install_kernel

        name = install_kernel(
            self.cloud, args.instance, display_name=args.display_name,
            on_shutdown="delete" if args.delete_on_shutdown else "keep")

        fate = (" When that kernel shuts down, the instance is deleted."
                if args.delete_on_shutdown else "")
        _say(f"Installed kernel {name}: choose Kernel → Change Kernel → "
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
            secret = _ask_secret(f"Inference secret for {args.endpoint} (hidden): ")
            if not secret:
                raise Stop("No secret was given; the chat was not opened.")
            from gpucloud_nb.client.inference import InferenceClient

            client = InferenceClient(args.endpoint, secret)
        return ChatWidget(client, model=args.model)

    # ------------------------------------------------------------------ checkpoint, move

    def _session(self, args: argparse.Namespace) -> None:
        from gpucloud_nb import magics_move

        magics_move.run(args, say=_say)

    # ------------------------------------------------------------------ endpoints

    def _endpoints(self, args: argparse.Namespace) -> Any:
        from gpucloud_nb import magics_endpoints

        return magics_endpoints.run(self.cloud, args, say=_say, confirm=_confirm, stop=Stop)

    def _ai_alias(self, args: argparse.Namespace) -> None:
        from gpucloud_nb import magics_ai

        magics_ai.run(self.cloud, args, self.shell, say=_say, stop=Stop)

    # ------------------------------------------------------------------ volumes

    def _volumes_list(self, args: argparse.Namespace) -> pandas.DataFrame:
        from gpucloud_nb import frames

        return frames.volumes_frame(self.cloud.volumes.list())

    def _volumes_offers(self, args: argparse.Namespace) -> pandas.DataFrame:
        from gpucloud_nb import frames

        return frames.volume_offers_frame(self.cloud.volumes.offers())

    def _volumes_create(self, args: argparse.Namespace) -> Volume:
        cloud = self.cloud
        offers = cloud.volumes.offers()
        provider = self._volume_provider(offers, args.region, args.provider, args.size)
        volume = cloud.volumes.create(name=args.name, cloud_provider=provider,
                                      region=args.region, size_in_gb=args.size)
        chosen = ""
        if args.provider is None:
            here = [o for o in offers if not o.regions or args.region in o.regions]
            selling = [o for o in here if not o.min_size_in_gb > args.size]
            if len(here) > 1:
                offer = next(o for o in here if o.cloud_provider.id == provider)
                among = (f"{len(here)} providers there" if len(selling) == len(here) else
                         f"the {len(selling)} of {len(here)} providers there selling "
                         f"{_gb(args.size)}")
                chosen = (f" with {offer.cloud_provider.display_name}, the cheapest of {among} "
                          f"({format_price(offer.price_per_gb_per_hour)}/GB/h; choose another with "
                          "--provider)")
        _say(f"Created volume {_label(volume.name, volume.id)} in {volume.region or args.region}"
             f"{chosen}, {_gb(volume.size_in_gb)}.")
        return volume

    @staticmethod
    def _volume_provider(offers: Sequence[VolumeOffer], region: str, given: str | None,
                         size: float = 0.0) -> str:
        """The provider ``_id`` to create a volume with in ``region``.

        ``given`` may be a provider ``_id``, its display name, or a unique part of the name.
        Without it, the cheapest provider (``pricePerGbPerHour``) that offers ``region`` and
        whose ``minSizeInGb`` allows ``size`` (the cheapest in the region if none does, so the
        refusal names its minimum).
        """
        here = [o for o in offers if not o.regions or region in o.regions]

        def choices(among: Sequence[VolumeOffer]) -> str:
            return _names(f"{o.cloud_provider.id} ({o.cloud_provider.display_name})" for o in among)

        if given is not None:
            wanted = given.casefold()
            match = [o for o in offers if wanted in (o.cloud_provider.id.casefold(),
                                                     o.cloud_provider.display_name.casefold())]
            match = match or [o for o in offers if wanted in o.cloud_provider.display_name.casefold()]
            if len(match) == 1:
                return match[0].cloud_provider.id
            if match:
                raise InvalidInputError(f"'{given}' matches several volume providers: "
                                        f"{choices(match)}; give one's _id with --provider.")
            raise InvalidInputError(f"No volume provider is called '{given}'; choose one of: "
                                    f"{choices(here or offers)}.")
        if not here:
            regions = sorted({r for o in offers for r in o.regions})
            raise InvalidInputError(f"No provider offers volumes in region '{region}'; "
                                    f"choose one of: {_names(regions)}.")
        fitting = [o for o in here if not o.min_size_in_gb > size] or here
        cheapest = min(fitting, key=lambda o: (not math.isfinite(o.price_per_gb_per_hour),
                                               o.price_per_gb_per_hour))
        return cheapest.cloud_provider.id

    def _volumes_get(self, args: argparse.Namespace) -> Volume:
        return self.cloud.volumes.get(args.id)

    def _volumes_delete(self, args: argparse.Namespace) -> None:
        cloud = self.cloud
        volume = cloud.volumes.get(args.id)
        label = _label(volume.name, volume.id)
        holders = [i for i in cloud.instances.list()
                   if i.status in HOLDING_STATUSES and i.holds_volume(volume.id)]
        if holders:
            users = _names(f"{_label(i.name, i.id)}, which is {i.status}" for i in holders)
            raise Stop(f"Volume {label} is attached to instance {users}; delete the instance "
                        f"first (%gpucloud delete {holders[0].id}).")
        if not args.yes and not _confirm(
            f"Delete volume {label}, {_gb(volume.size_in_gb)}, and all the data on it?",
            f"Could not ask for confirmation here; add --yes to delete volume {label}.",
        ):
            _say(f"Cancelled: volume {label} was not deleted.")
            return None
        try:
            cloud.volumes.delete(volume.id)
        except BadRequestError as error:
            if "attached to instance" in str(error):
                raise Stop(f"{error} Delete the instance first; the volume was not deleted.") \
                    from None
            raise
        _say(f"Deleted volume {label}.")
        return None


def load_ipython_extension(ipython: InteractiveShell) -> None:
    """``%load_ext gpucloud_nb``: register the ``%gpucloud`` line and cell magic."""
    ipython.register_magics(GPUCloudMagics)

