import { Widget } from '@lumino/widgets';

import { formatStatus, warning } from './format';
import { GpuCloudModel } from './model';

/**
 * The status bar item (`#gpucloud-statusbar`): "$1.23/h · 2 running". A click opens the
 * sidebar; it turns to a warning when the cap is reached or an instance has run too long.
 */
export class GpuCloudStatus extends Widget {
  constructor(model: GpuCloudModel, open: () => void) {
    super();
    this.model = model;
    this.id = 'gpucloud-statusbar';
    this.addClass('gpucloud-Status');
    this.node.setAttribute('role', 'button');
    this.node.addEventListener('click', open);
    model.changed.connect(this._render, this);
    this._render();
  }

  readonly model: GpuCloudModel;

  private _render(): void {
    const { snapshot, error } = this.model;
    let text = 'GPU cloud…';
    let title = 'GPU cloud: loading the instances.';
    let warn: string | null = null;
    if (error || snapshot?.error) {
      text = 'GPU cloud: error';
      title = (error || snapshot?.error) as string;
    } else if (snapshot) {
      text = formatStatus(snapshot.totals);
      warn = warning(snapshot, this.model.warnAfterHours, Date.now());
      const where = snapshot.sandbox ? 'SANDBOX (simulated, no charges)' : snapshot.url ?? 'GPU cloud';
      title = `${where}: ${text}. ${warn ?? ''} Click to open the GPU cloud sidebar.`;
    }
    this.node.textContent = (warn ? '⚠ ' : '') + text;
    this.node.title = title.replace(/\s+/g, ' ').trim();
    const problem = (snapshot?.deleteProblems ?? []).length > 0;
    this.toggleClass('gpucloud-mod-warning', warn !== null && !problem);
    this.toggleClass('gpucloud-mod-error', problem);
    this.toggleClass('gpucloud-mod-sandbox', !!snapshot?.sandbox);
  }
}
