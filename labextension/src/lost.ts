import { ApiError, requestAPI } from './api';
import { formatLost, ILostKernel } from './lostFormat';
import { GpuCloudModel } from './model';

/** How often the section asks the server (no cloud request: the kernels' own state). */
const EVERY_MS = 3000;

function el<K extends keyof HTMLElementTagNameMap>(tag: K, className: string, text = ''): HTMLElementTagNameMap[K] {
  const node = document.createElement(tag);
  node.className = className;
  node.textContent = text;
  return node;
}

/**
 * The sidebar's "Lost kernels" section (`.gpucloud-Lost`): one row per kernel of this server
 * whose instance is lost (`[data-gpucloud-lost-kernel=ID]`, `data-state` lost, restoring,
 * failed or restored), with the kernel's sentence and a Restore button
 * (`.gpucloud-Lost-restore`) that does what `%gpucloud restore` does: the newest checkpoint on
 * an instance like the lost one, under the same notebook. Progress and the one sentence of a
 * failure show in the row. Hidden while no kernel is lost.
 */
export class LostKernelsSection {
  readonly node: HTMLElement;

  constructor(model: GpuCloudModel) {
    this.node = el('section', 'gpucloud-Lost');
    this.node.append(el('h3', 'gpucloud-Lost-title', 'Lost kernels'), this._error, this._list);
    this.node.hidden = true;
    this._error.hidden = true;
    model.changed.connect(() => void this.refresh());
    void this.refresh();
    this._timer = window.setInterval(() => void this.refresh(), EVERY_MS);
  }

  dispose(): void {
    window.clearInterval(this._timer);
  }

  /** Ask the server for the lost kernels and show them. */
  async refresh(): Promise<void> {
    if (this._asking) {
      return;
    }
    this._asking = true;
    try {
      const answer = await requestAPI<{ kernels: ILostKernel[] }>('kernels/lost');
      this._render(answer?.kernels ?? []);
    } catch {
      // the instances' own error line says the server is unreachable
    } finally {
      this._asking = false;
    }
  }

  private _render(rows: ILostKernel[]): void {
    this.node.hidden = rows.length === 0;
    const keep = new Set(rows.map(row => row.kernelId));
    for (const [id, node] of this._rows) {
      if (!keep.has(id)) {
        node.remove();
        this._rows.delete(id);
      }
    }
    for (const row of rows) {
      let node = this._rows.get(row.kernelId);
      if (!node) {
        node = this._makeRow(row.kernelId);
        this._rows.set(row.kernelId, node);
        this._list.append(node);
      }
      this._fill(node, row);
    }
  }

  private _fill(node: HTMLLIElement, row: ILostKernel): void {
    const text = formatLost(row);
    const part = (name: string) => node.querySelector(`.gpucloud-Lost-${name}`) as HTMLElement;
    node.dataset.state = row.state;
    part('name').textContent = text.name;
    part('name').title = row.notebook || row.kernelId;
    part('status').textContent = text.status;
    const problem = this._problems.get(row.kernelId) ?? '';
    part('detail').textContent = problem || text.detail;
    const button = part('restore') as HTMLButtonElement;
    button.hidden = !text.showRestore;
    button.textContent = text.restoreLabel;
    button.title = text.restoreTitle;
    button.disabled = !text.canRestore || node.dataset.busy === 'true';
  }

  private _makeRow(id: string): HTMLLIElement {
    const node = el('li', 'gpucloud-LostKernel');
    node.dataset.gpucloudLostKernel = id;
    const top = el('div', 'gpucloud-Row-line');
    top.append(el('span', 'gpucloud-Lost-name'), el('span', 'gpucloud-Lost-status'));
    const detail = el('p', 'gpucloud-Lost-detail');
    detail.setAttribute('role', 'status');
    const button = el('button', 'jp-Button jp-mod-styled jp-mod-accept gpucloud-Lost-restore', 'Restore');
    button.addEventListener('click', () => void this._restore(id));
    node.append(top, detail, button);
    return node;
  }

  private async _restore(id: string): Promise<void> {
    const node = this._rows.get(id);
    if (node) {
      node.dataset.busy = 'true';
      (node.querySelector('.gpucloud-Lost-restore') as HTMLButtonElement).disabled = true;
    }
    this._problems.delete(id);
    try {
      await requestAPI(`kernels/${encodeURIComponent(id)}/restore`, { method: 'POST' });
    } catch (error) {
      this._problems.set(id, error instanceof ApiError ? error.message : String(error));
    } finally {
      if (node) {
        delete node.dataset.busy;
      }
    }
    await this.refresh();
  }

  private _timer: number;
  private _asking = false;
  private _error = el('p', 'gpucloud-Lost-error');
  private _list = el('ul', 'gpucloud-LostList');
  private _rows = new Map<string, HTMLLIElement>();
  private _problems = new Map<string, string>();
}
