"""The launch form's widgets and their layout, without behaviour (:class:`LaunchForm` adds it).

Each field has a stable CSS class (listed on :class:`~gpucloud_nb.widgets.LaunchForm`) so a
browser test or a stylesheet can find it; boxes that only some offers need start hidden.

    >>> fields = LaunchFields()  # doctest: +SKIP
    >>> fields.name.value = "train-1"  # doctest: +SKIP
"""

from __future__ import annotations

from typing import Any

import ipywidgets as widgets

from gpucloud_nb.launch_model import DEFAULT_IMAGE
from gpucloud_nb.widgets._layout import STYLE, show
from gpucloud_nb.widgets._status import StatusLine

__all__ = ["LaunchFields"]

_WIDE = widgets.Layout(width="42em")
_MEDIUM = widgets.Layout(width="28em")


class LaunchFields(widgets.VBox):
    """Every widget of the launch form, built and laid out; the form wires them."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._build_widgets()
        self.status = StatusLine("gpucloud-launch-status")
        self.volume_status = StatusLine("gpucloud-volume-status")
        self._layout_children()

    def _build_widgets(self) -> None:
        def text(description: str, css: str, placeholder: str = "", layout: Any = _MEDIUM) -> Any:
            widget = widgets.Text(description=description, placeholder=placeholder, style=STYLE,
                                  layout=widgets.Layout(width=layout.width))
            widget.add_class(css)
            return widget

        def dropdown(description: str, css: str, layout: Any = _WIDE) -> widgets.Dropdown:
            widget = widgets.Dropdown(description=description, options=[], style=STYLE,
                                      layout=widgets.Layout(width=layout.width))
            widget.add_class(css)
            return widget

        self.title = widgets.HTML()
        self.title.add_class("gpucloud-launch-title")
        self.name = text("Name", "gpucloud-launch-name", "e.g. train-1")
        self.offer = dropdown("Offer", "gpucloud-launch-offer")
        self.region = dropdown("Region", "gpucloud-launch-region", _MEDIUM)
        self.os = dropdown("OS image", "gpucloud-launch-os", _MEDIUM)
        self.cloud_init_note = widgets.HTML()
        self.cloud_init_note.add_class("gpucloud-launch-cloud-init-note")
        self.cloud_init = widgets.Textarea(
            description="cloud-init script", placeholder="#cloud-config\npackages:\n  - htop",
            rows=4, style=STYLE, layout=widgets.Layout(width=_WIDE.width))
        self.cloud_init.add_class("gpucloud-launch-cloud-init")
        self.cloud_init_file = widgets.FileUpload(description="Upload script", accept="",
                                                  multiple=False, icon="upload")
        self.cloud_init_file.add_class("gpucloud-launch-cloud-init-file")
        self.image = text("Container image", "gpucloud-launch-image", layout=_WIDE)
        self.image.value = DEFAULT_IMAGE  # a value, launched as shown (a placeholder is not)

        self.volume = dropdown("Volume", "gpucloud-launch-volume", _MEDIUM)
        self.volume_create_toggle = widgets.Button(description="New volume…", icon="plus",
                                                   tooltip="Create a persistent volume here")
        self.volume_create_toggle.add_class("gpucloud-volume-create-toggle")
        self.volume_info = widgets.HTML()
        self.volume_info.add_class("gpucloud-volume-info")
        self.volume_name = text("Volume name", "gpucloud-volume-name", "data")
        self.volume_size = widgets.IntText(description="Size (GB)", value=100, style=STYLE,
                                           layout=widgets.Layout(width="14em"))
        self.volume_size.add_class("gpucloud-volume-size")
        self.volume_create_button = widgets.Button(description="Create volume", icon="hdd-o",
                                                   disabled=True)
        self.volume_create_button.add_class("gpucloud-volume-create-button")
        self.volume_reason = widgets.HTML()
        self.volume_reason.add_class("gpucloud-volume-reason")

        self.ssh_key = widgets.Textarea(description="SSH public key",
                                        placeholder="ssh-ed25519 AAAA… you@laptop", rows=2,
                                        style=STYLE, layout=widgets.Layout(width=_WIDE.width))
        self.ssh_key.add_class("gpucloud-launch-ssh-key")
        self.ssh_key_id = text("or saved SSH key id", "gpucloud-launch-ssh-key-id")

        self.auto_delete = widgets.Text(
            description="Auto-delete after", placeholder="e.g. 2h or 1h30m; empty: never",
            style=STYLE, layout=widgets.Layout(width="24em"))
        self.auto_delete.add_class("gpucloud-launch-auto-delete")
        self.budget = widgets.BoundedFloatText(
            value=0, min=0, max=1_000_000, step=1, description="Budget ($, 0 = none)",
            style=STYLE, layout=widgets.Layout(width="24em"))
        self.budget.add_class("gpucloud-launch-budget")
        self.idle_delete = widgets.Text(
            description="Delete when idle for", placeholder="e.g. 30m; empty: never",
            style=STYLE, layout=widgets.Layout(width="24em"))
        self.idle_delete.add_class("gpucloud-launch-idle-delete")
        self.idle_note = widgets.HTML()
        self.idle_note.add_class("gpucloud-launch-idle-note")
        self.cost = widgets.HTML()
        self.cost.add_class("gpucloud-launch-cost")
        self.reason = widgets.HTML()
        self.reason.add_class("gpucloud-launch-reason")
        self.launch_button = widgets.Button(description="Launch", button_style="primary",
                                            icon="rocket", disabled=True)
        self.launch_button.add_class("gpucloud-launch-button")
        self.progress = widgets.FloatProgress(value=0.0, min=0.0, max=1.0, bar_style="info",
                                              layout=widgets.Layout(width="20em"))
        self.progress.add_class("gpucloud-launch-progress")
        self.elapsed = widgets.HTML()
        self.elapsed.add_class("gpucloud-launch-elapsed")
        self.stop_button = widgets.Button(description="Stop waiting", icon="stop",
                                          button_style="warning",
                                          tooltip="Stop waiting; the instance keeps launching")
        self.stop_button.add_class("gpucloud-launch-stop")
        self.result = widgets.HTML()
        self.result.add_class("gpucloud-launch-result")
        # A text area (rows set to fit when shown): the command is read and copied whole.
        self.ssh_command = widgets.Textarea(description="SSH", disabled=True, rows=2, style=STYLE,
                                            layout=widgets.Layout(width=_WIDE.width))
        self.ssh_command.add_class("gpucloud-launch-ssh")

    def _layout_children(self) -> None:
        self.cloud_init_box = widgets.VBox([self.cloud_init_note, self.cloud_init,
                                            self.cloud_init_file])
        self.vm_box = widgets.VBox([self.os, self.cloud_init_box])
        self.container_box = widgets.VBox([self.image])
        self.volume_create_box = widgets.VBox([
            self.volume_info,
            widgets.HBox([self.volume_name, self.volume_size, self.volume_create_button]),
            self.volume_reason, self.volume_status,
        ])
        self.volume_create_box.add_class("gpucloud-volume-create")
        self.volume_create_box.layout.margin = "0 0 0 2em"
        show(self.volume_create_box, False)
        self.progress_box = widgets.HBox([self.progress, self.elapsed, self.stop_button])
        show(self.progress_box, False)
        self.result_box = widgets.VBox([self.result, self.ssh_command])
        show(self.result_box, False)
        self.children = (
            self.title, self.name, self.offer, self.region, self.vm_box, self.container_box,
            widgets.HBox([self.volume, self.volume_create_toggle]), self.volume_create_box,
            self.ssh_key, self.ssh_key_id, self.auto_delete, self.budget,
            widgets.HBox([self.idle_delete, self.idle_note]), self.cost,
            widgets.HBox([self.launch_button, self.reason]),
            self.progress_box, self.status, self.result_box,
        )
