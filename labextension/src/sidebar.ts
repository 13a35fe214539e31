import { Clipboard, Dialog, showDialog } from '@jupyterlab/apputils';
import { Widget } from '@lumino/widgets';

import { chipIcon } from './icon';
import {
  formatAutoDelete,
  formatGpuUse,
  formatIdle,
  formatMoney,
  formatRow,
  IInstanceRow,
  sparkline,
  spendAt,
  warning
} from './format';
import { GpuCloudModel } from './model';

function el<K extends keyof HTMLElementTagNameMap>(
  tag: K,
  className: string,
  text = ''
): HTMLElementTagNameMap[K] {
  const node = document.createElement(tag);
  node.className = className;
  node.textContent = text;
  return node;
}

/**
 * The "GPU cloud" sidebar (`#gpucloud-sidebar`): one row per instance that is not deleted
 * (`[data-gpucloud-instance=ID]`), totals, a SANDBOX badge, and empty, loading and error states.
 */
export class GpuCloudSidebar extends Widget {
  constructor(model: GpuCloudModel) {
    super();
    this.model = model;
    this.id = 'gpucloud-sidebar';
    this.addClass('gpucloud-Sidebar');
    this.title.icon = chipIcon;
    this.title.caption = 'GPU cloud';
    const header = el('header', 'gpucloud-Sidebar-header');
    header.append(el('h2', 'gpucloud-Sidebar-title', 'GPU cloud'));
    this._badge = el('span', 'gpucloud-Badge', 'SANDBOX');
    header.append(this._badge);
    this._totals = el('div', 'gpucloud-Totals');
    this._rate = el('span', 'gpucloud-Totals-rate');
    this._spent = el('span', 'gpucloud-Totals-spent');
    this._totals.append(this._rate, this._spent);
    this._warning = el('p', 'gpucloud-Warning');
    this._message = el('p', 'gpucloud-Message');
    this._list = el('ul', 'gpucloud-List');
    this._note = el(
      'p',
      'gpucloud-Note',
      'Auto-delete timers set in a kernel run in that kernel (they stop with it) and are not shown here.'
    );
    this._note.hidden = true;
    this.node.append(header, this._totals, this._warning, this._message, this._list, this._note);
    model.changed.connect(this._render, this);
    this._render();
  }

  readonly model: GpuCloudModel;

  private _render(): void {
    if (this.isDisposed) {
      return;
    }
    const { snapshot, error } = this.model;
    const now = Date.now();
    this._badge.hidden = !snapshot?.sandbox;
    this._badge.title = snapshot?.url
      ? `A simulated cloud on this machine at ${snapshot.url}: no real GPUs, no charges.`
      : '';
    let message = '';
    let state = 'ready';
    if (error) {
      message = error;
      state = 'error';
    } else if (snapshot === null) {
      message = 'Loading the instances…';
      state = 'loading';
    } else if (snapshot.error) {
      message = snapshot.error;
      state = 'error';
    } else if (snapshot.instances.length === 0) {
      message = 'No instances: launch one from a notebook and it shows here.';
      state = 'empty';
    }
    this.node.dataset.state = state;
    this._message.textContent = message;
    this._message.hidden = !message;
    const rows = snapshot?.instances ?? [];
    if (snapshot) {
      const spend = rows.reduce(
        (sum, row) => sum + spendAt(row, snapshot.polledAt, now) - row.spend,
        snapshot.totals.spend
      );
      this._rate.textContent = `${formatMoney(snapshot.totals.hourly)}/h now`;
      this._spent.textContent = `${formatMoney(spend)} spent so far, deleted instances included`;
      this._spent.title =
        'Every instance this cloud lists, deleted ones too, billed from when it became active ' +
        '(≈ where only its creation time is known).';
      this._totals.hidden = false;
    } else {
      this._totals.hidden = true;
    }
    // On the real cloud a timer set in a kernel lives in that kernel: the sidebar cannot see it.
    this._note.hidden = !snapshot || !!snapshot.sandbox || !!snapshot.error;
    const warn = snapshot && !snapshot.error ? warning(snapshot, this.model.warnAfterHours, now) : null;
    this._warning.textContent = warn ?? '';
    this._warning.hidden = warn === null;
    this._warning.classList.toggle('gpucloud-mod-error', (snapshot?.deleteProblems ?? []).length > 0);
    this._renderRows(rows, now, snapshot?.polledAt);
  }

  private _renderRows(rows: IInstanceRow[], now: number, polledAt?: string | null): void {
    const keep = new Set(rows.map(row => row.id));
    for (const [id, node] of this._rows) {
      if (!keep.has(id)) {
        node.remove();
        this._rows.delete(id);
      }
    }
    for (const row of rows) {
      let node = this._rows.get(row.id);
      if (!node) {
        node = this._makeRow(row.id);
        this._rows.set(row.id, node);
      }
      this._list.append(node); // keeps the server's order
      const text = formatRow(row, now, polledAt);
      const set = (part: string, value: string, title = '') => {
        const cell = node!.querySelector(`.gpucloud-Row-${part}`) as HTMLElement;
        cell.textContent = value;
        if (title) {
          cell.title = title;
        }
      };
      node.dataset.status = row.status;
      set('name', text.name, row.id);
      set('gpu', text.gpu);
      set('status', text.status);
      set('age', text.age ? `up ${text.age}` : '', row.createdAt ?? '');
      set('spend', text.spend, row.estimated ? 'Estimated: billed from its creation time.' : '');
      const autoDelete = formatAutoDelete(row, now);
      set('countdown', autoDelete.text, autoDelete.title);
      set('gpuuse', formatGpuUse(row.gpu), 'GPU utilisation and memory used (nvidia-smi), last 10 minutes');
      const line = node.querySelector('.gpucloud-Row-spark') as SVGPolylineElement;
      line.setAttribute('points', row.gpu && !row.gpu.stale ? sparkline(row.gpu.history, now / 1000) : '');
      const idle = formatIdle(row.idle, now, polledAt);
      set('idle', idle.text, row.idle ? `Deleted by ${row.idle.by} when idle this long.` : '');
      (node.querySelector('.gpucloud-Row-keep') as HTMLButtonElement).hidden = !idle.warn;
      (node.querySelector('.gpucloud-Row-use') as HTMLElement).hidden = !row.gpu && !idle.text;
      node.dataset.idle = idle.warn ? 'warning' : idle.text ? 'halfway' : '';
      const problem = node.querySelector('.gpucloud-Row-problem') as HTMLElement;
      problem.textContent = row.deleteProblem ?? '';
      problem.hidden = !row.deleteProblem;
      const ssh = node.querySelector('.gpucloud-Row-ssh') as HTMLButtonElement;
      ssh.disabled = !row.sshCommand;
      ssh.title = row.sshCommand ? `Copy: ${row.sshCommand}` : 'No address yet';
      const del = node.querySelector('.gpucloud-Row-delete') as HTMLButtonElement;
      del.disabled = row.status === 'deleting';
    }
  }

  private _makeRow(id: string): HTMLLIElement {
    const node = el('li', 'gpucloud-Row');
    node.dataset.gpucloudInstance = id;
    const top = el('div', 'gpucloud-Row-line');
    top.append(el('span', 'gpucloud-Row-name'), el('span', 'gpucloud-Row-status'));
    const middle = el('div', 'gpucloud-Row-line gpucloud-Row-detail');
    middle.append(el('span', 'gpucloud-Row-gpu'), el('span', 'gpucloud-Row-age'), el('span', 'gpucloud-Row-spend'));
    const bottom = el('div', 'gpucloud-Row-line gpucloud-Row-detail');
    const ssh = el('button', 'jp-Button jp-mod-minimal gpucloud-Row-ssh', 'Copy SSH');
    ssh.addEventListener('click', () => this._copySsh(id));
    const del = el('button', 'jp-Button jp-mod-minimal gpucloud-Row-delete', 'Delete');
    del.addEventListener('click', () => void this._confirmDelete(id));
    bottom.append(el('span', 'gpucloud-Row-countdown'), ssh, del);
    const use = el('div', 'gpucloud-Row-line gpucloud-Row-detail gpucloud-Row-use');
    const svg = document.createElementNS('http://www.w3.org/2000/svg', 'svg');
    svg.setAttribute('class', 'gpucloud-Row-sparkline');
    svg.setAttribute('viewBox', '0 0 60 16');
    svg.setAttribute('width', '60');
    svg.setAttribute('height', '16');
    svg.setAttribute('aria-hidden', 'true');
    const polyline = document.createElementNS('http://www.w3.org/2000/svg', 'polyline');
    polyline.setAttribute('class', 'gpucloud-Row-spark');
    svg.append(polyline);
    const keep = el('button', 'jp-Button jp-mod-minimal gpucloud-Row-keep', 'Keep');
    keep.title = 'Start the idle clock again';
    keep.addEventListener('click', () => void this.model.keep(id));
    use.append(el('span', 'gpucloud-Row-gpuuse'), svg, el('span', 'gpucloud-Row-idle'), keep);
    const problem = el('p', 'gpucloud-Row-problem');
    problem.setAttribute('role', 'alert');
    node.append(top, middle, use, bottom, problem);
    return node;
  }

  private _find(id: string): IInstanceRow | undefined {
    return this.model.snapshot?.instances.find(row => row.id === id);
  }

  private _copySsh(id: string): void {
    const row = this._find(id);
    if (row?.sshCommand) {
      Clipboard.copyToSystem(row.sshCommand);
    }
  }

  private async _confirmDelete(id: string): Promise<void> {
    const row = this._find(id);
    const name = row?.name || id;
    let fate: string;
    try {
      fate = await this.model.fate(id);
    } catch (error) {
      fate = 'its data is lost unless it sits on a volume';
    }
    const body = el('p', 'gpucloud-Confirm');
    body.textContent =
      `Delete ${name} (${id})? Whatever runs on it stops, and ${fate}. ` +
      'Billing stops once the cloud has deleted it.';
    const result = await showDialog({
      title: `Delete ${name}?`,
      body: new Widget({ node: body }),
      buttons: [Dialog.cancelButton(), Dialog.warnButton({ label: 'Delete' })]
    });
    if (!result.button.accept) {
      return;
    }
    try {
      await this.model.remove(id);
    } catch (error) {
      await showDialog({
        title: `${name} was not deleted`,
        body: error instanceof Error ? error.message : String(error),
        buttons: [Dialog.okButton()]
      });
    }
  }

  private _badge: HTMLElement;
  private _totals: HTMLElement;
  private _rate: HTMLElement;
  private _spent: HTMLElement;
  private _message: HTMLElement;
  private _warning: HTMLElement;
  private _list: HTMLElement;
  private _note: HTMLElement;
  private _rows = new Map<string, HTMLLIElement>();
}
