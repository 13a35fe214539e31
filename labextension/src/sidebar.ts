import { Clipboard, Dialog, showDialog } from '@jupyterlab/apputils';
import { Widget } from '@lumino/widgets';

import { EndpointsSection } from './endpoints';
import { chipIcon } from './icon';
import { LostKernelsSection } from './lost';
import {
  formatAutoDelete,
  formatCluster,
  formatGatewayLeft,
  formatGpuUse,
  formatHourlyTitle,
  formatIdle,
  formatMoney,
  formatRow,
  groupClusters,
  IClusterGroup,
  IInstanceRow,
  sparkline,
  SpendFloor,
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
 * (`[data-gpucloud-instance=ID]`), the instances of a Dask cluster under one heading with its
 * $/h and a delete-all (`[data-gpucloud-cluster=NAME]`), totals, a SANDBOX badge, and empty,
 * loading and error states. Through a class gateway the totals add the key's budget left
 * (`.gpucloud-BudgetLeft`) and the warning line its 80 % or spent-budget sentence.
 */
export class GpuCloudSidebar extends Widget {
  constructor(model: GpuCloudModel, openNotebook?: (kernelName: string) => Promise<unknown>) {
    super();
    this.model = model;
    this._openNotebook = openNotebook ?? null;
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
    this._left = el('div', 'gpucloud-BudgetLeft');
    this._left.hidden = true;
    this._totals.append(this._rate, this._spent, this._left);
    this._warning = el('p', 'gpucloud-Warning');
    this._message = el('p', 'gpucloud-Message');
    this._list = el('ul', 'gpucloud-List');
    this._note = el(
      'p',
      'gpucloud-Note',
      'Talking to the cloud directly (GPUCLOUD_GATEWAY=off): nothing here deletes by timer, budget or idle limit, so delete what you are done with.'
    );
    this._note.hidden = true;
    this._endpoints = new EndpointsSection(model);
    this._lost = new LostKernelsSection(model);
    this.node.append(header, this._totals, this._warning, this._message, this._lost.node,
      this._list, this._endpoints.node, this._note);
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
      this._floor.scope(snapshot.url ?? '');
      const added = rows.reduce(
        (sum, row) => sum + spendAt(row, snapshot.polledAt, now) - row.spend,
        snapshot.totals.spend
      );
      const spend = this._floor.shown('', added);
      this._rate.textContent = `${formatMoney(snapshot.totals.hourly)}/h now`;
      this._rate.title = formatHourlyTitle(snapshot.totals);
      this._spent.textContent = `${formatMoney(spend)} spent so far, deleted instances included`;
      this._spent.title =
        'Every instance this cloud lists, deleted ones too, billed from when it became active ' +
        '(≈ where only its creation time is known).';
      const gateway = snapshot.gateway;
      this._left.textContent = gateway ? formatGatewayLeft(gateway) : '';
      this._left.hidden = !gateway;
      this._totals.hidden = false;
    } else {
      this._totals.hidden = true;
    }
    // Only the cloud directly (GPUCLOUD_GATEWAY=off) has no keeper of timers, budgets and idle
    // limits (the client refuses them there); the sandbox service and a gateway keep them.
    this._note.hidden = !snapshot || !!snapshot.sandbox || !!snapshot.error || !!snapshot.gateway;
    const warn = snapshot && !snapshot.error ? warning(snapshot, this.model.warnAfterHours, now) : null;
    this._warning.textContent = warn ?? '';
    this._warning.hidden = warn === null;
    this._warning.classList.toggle('gpucloud-mod-error', (snapshot?.deleteProblems ?? []).length > 0);
    this._renderRows(rows, now, snapshot?.polledAt);
    this._endpoints.render(snapshot);
  }

  private _renderRows(rows: IInstanceRow[], now: number, polledAt?: string | null): void {
    const keep = new Set(rows.map(row => row.id));
    for (const [id, node] of this._rows) {
      if (!keep.has(id)) {
        node.remove();
        this._rows.delete(id);
      }
    }
    const grouped = groupClusters(rows);
    const clusters = new Set(grouped.filter(item => 'rows' in item).map(item => (item as IClusterGroup).cluster));
    for (const [name, node] of this._clusters) {
      if (!clusters.has(name)) {
        node.remove();
        this._clusters.delete(name);
      }
    }
    const ordered: IInstanceRow[] = [];
    for (const item of grouped) {
      if ('rows' in item) {
        this._list.append(this._renderCluster(item));
        ordered.push(...item.rows);
      } else {
        ordered.push(item);
      }
      const members = 'rows' in item ? item.rows : [item];
      for (const row of members) {
        let node = this._rows.get(row.id);
        if (!node) {
          node = this._makeRow(row.id);
          this._rows.set(row.id, node);
        }
        node.classList.toggle('gpucloud-Row--member', 'rows' in item);
        this._list.append(node); // keeps the server's order, a cluster's members together
      }
    }
    for (const row of ordered) {
      const node = this._rows.get(row.id)!;
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
      const money = formatMoney(this._floor.shown(row.id, spendAt(row, polledAt, now)));
      set('spend', row.estimated ? `≈${money}` : money,
        row.estimated ? 'Estimated: billed from its creation time.' : '');
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
      const notebook = node.querySelector('.gpucloud-Row-notebook') as HTMLButtonElement;
      notebook.hidden = this._openNotebook === null;
      notebook.disabled = row.status !== 'active';
      notebook.title =
        row.status === 'active'
          ? `A new notebook whose kernel runs on ${row.name || row.id}`
          : 'Once the instance is active';
    }
  }

  private _renderCluster(group: IClusterGroup): HTMLLIElement {
    let node = this._clusters.get(group.cluster);
    if (!node) {
      node = el('li', 'gpucloud-Cluster');
      node.dataset.gpucloudCluster = group.cluster;
      const line = el('div', 'gpucloud-Row-line');
      const del = el('button', 'jp-Button jp-mod-minimal gpucloud-Cluster-delete', 'Delete all');
      const name = group.cluster;
      del.addEventListener('click', () => void this._confirmDeleteCluster(name));
      line.append(el('span', 'gpucloud-Cluster-name'), el('span', 'gpucloud-Cluster-detail'), del);
      node.append(line);
      this._clusters.set(group.cluster, node);
    }
    const text = formatCluster(group);
    (node.querySelector('.gpucloud-Cluster-name') as HTMLElement).textContent = text.title;
    (node.querySelector('.gpucloud-Cluster-detail') as HTMLElement).textContent = text.detail;
    const del = node.querySelector('.gpucloud-Cluster-delete') as HTMLButtonElement;
    del.disabled = group.rows.every(row => row.status === 'deleting');
    return node;
  }

  private async _confirmDeleteCluster(cluster: string): Promise<void> {
    const rows = (this.model.snapshot?.instances ?? []).filter(
      row => row.cluster === cluster && row.status !== 'deleting'
    );
    if (rows.length === 0) {
      return;
    }
    const body = el('p', 'gpucloud-Confirm');
    body.textContent =
      `Delete the ${rows.length} instances of cluster ${cluster} (${rows.map(row => row.name || row.id).join(', ')})? ` +
      'The Dask scheduler and workers on them stop, and their data is lost unless it sits on a volume. ' +
      'Billing stops once the cloud has deleted them.';
    const result = await showDialog({
      title: `Delete cluster ${cluster}?`,
      body: new Widget({ node: body }),
      buttons: [Dialog.cancelButton(), Dialog.warnButton({ label: 'Delete all' })]
    });
    if (!result.button.accept) {
      return;
    }
    const failed: string[] = [];
    await Promise.all(
      rows.map(row =>
        this.model.remove(row.id).catch((error: unknown) => {
          failed.push(`${row.name || row.id}: ${error instanceof Error ? error.message : String(error)}`);
        })
      )
    );
    if (failed.length) {
      await showDialog({
        title: `${failed.length} of cluster ${cluster} not deleted`,
        body: failed.join('\n'),
        buttons: [Dialog.okButton()]
      });
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
    const notebook = el('button', 'jp-Button jp-mod-minimal gpucloud-Row-notebook', 'Notebook on this instance');
    notebook.addEventListener('click', () => void this._notebookOn(id));
    const del = el('button', 'jp-Button jp-mod-minimal gpucloud-Row-delete', 'Delete');
    del.addEventListener('click', () => void this._confirmDelete(id));
    bottom.append(el('span', 'gpucloud-Row-countdown'), notebook, ssh, del);
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

  /** Copy the row's ssh command; the button says "Copied" for two seconds. */
  private _copySsh(id: string): void {
    const row = this._find(id);
    const button = this._rows.get(id)?.querySelector('.gpucloud-Row-ssh') as HTMLButtonElement | null;
    if (!row?.sshCommand || !button) {
      return;
    }
    Clipboard.copyToSystem(row.sshCommand);
    button.textContent = 'Copied ✓';
    button.classList.add('gpucloud-mod-copied');
    window.clearTimeout(Number(button.dataset.copiedTimer ?? 0));
    button.dataset.copiedTimer = String(
      window.setTimeout(() => {
        button.textContent = 'Copy SSH';
        button.classList.remove('gpucloud-mod-copied');
      }, 2000)
    );
  }

  /** Install the instance's kernelspec and open a new notebook on it. */
  private async _notebookOn(id: string): Promise<void> {
    const name = this._find(id)?.name || id;
    try {
      const kernel = await this.model.installKernel(id);
      await this._openNotebook?.(kernel.name);
    } catch (error) {
      await showDialog({
        title: `No notebook on ${name}`,
        body: error instanceof Error ? error.message : String(error),
        buttons: [Dialog.okButton()]
      });
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

  private _endpoints: EndpointsSection;
  private _lost: LostKernelsSection;
  private _badge: HTMLElement;
  private _totals: HTMLElement;
  private _left: HTMLElement;
  private _rate: HTMLElement;
  private _spent: HTMLElement;
  private _message: HTMLElement;
  private _warning: HTMLElement;
  private _list: HTMLElement;
  private _note: HTMLElement;
  private _rows = new Map<string, HTMLLIElement>();
  private _openNotebook: ((kernelName: string) => Promise<unknown>) | null;
  private _clusters = new Map<string, HTMLLIElement>();
  private _floor = new SpendFloor();
}
