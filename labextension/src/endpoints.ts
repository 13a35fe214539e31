import { Dialog, showDialog } from '@jupyterlab/apputils';
import { Widget } from '@lumino/widgets';

import { ApiError, requestAPI } from './api';
import { formatEndpoint, formatEndpointsTotal, IEndpointRow, IEndpointsSnapshot } from './endpointFormat';
import { GpuCloudModel } from './model';

type Action = 'start' | 'stop' | 'delete';

function el<K extends keyof HTMLElementTagNameMap>(tag: K, className: string, text = ''): HTMLElementTagNameMap[K] {
  const node = document.createElement(tag);
  node.className = className;
  node.textContent = text;
  return node;
}

function endpointsOf(snapshot: object | null): IEndpointRow[] {
  return (snapshot as IEndpointsSnapshot | null)?.endpoints ?? [];
}

/**
 * The sidebar's "Endpoints" section (`.gpucloud-Endpoints`): one row per inference instance
 * that is not deleted (`[data-gpucloud-endpoint=ID]`, its `data-status` the cloud's), with its
 * status, containers ready/total, $/h now, and Start, Stop and Delete (Delete asks first). A
 * refused action is one sentence in the row (`.gpucloud-Endpoint-problem`). Hidden while there
 * are no endpoints and no error.
 */
export class EndpointsSection {
  readonly node: HTMLElement;

  constructor(model: GpuCloudModel) {
    this._model = model;
    this.node = el('section', 'gpucloud-Endpoints');
    const header = el('div', 'gpucloud-Endpoints-header');
    header.append(el('h3', 'gpucloud-Endpoints-title', 'Endpoints'), this._total);
    this.node.append(header, this._error, this._list);
    this.node.hidden = true;
  }

  /** Show the endpoints of `snapshot` (the model's, as `GET /gpucloud/instances` returns it). */
  render(snapshot: object | null): void {
    const rows = endpointsOf(snapshot);
    const error = (snapshot as IEndpointsSnapshot | null)?.endpointsError ?? '';
    this.node.hidden = rows.length === 0 && !error;
    this._total.textContent = formatEndpointsTotal(rows);
    this._error.textContent = error;
    this._error.hidden = !error;
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
      this._list.append(node); // the server's order
      this._fill(node, row);
    }
  }

  private _fill(node: HTMLLIElement, row: IEndpointRow): void {
    const text = formatEndpoint(row);
    const part = (name: string) => node.querySelector(`.gpucloud-Endpoint-${name}`) as HTMLElement;
    node.dataset.status = row.status;
    part('name').textContent = text.name;
    part('name').title = row.address ? `${row.id} at ${row.address}` : row.id;
    part('status').textContent = text.status;
    part('containers').textContent = text.containers;
    part('price').textContent = text.price;
    part('price').title = text.priceTitle;
    const busy = node.dataset.busy === 'true';
    (part('start') as HTMLButtonElement).disabled = busy || !text.canStart;
    (part('stop') as HTMLButtonElement).disabled = busy || !text.canStop;
    (part('delete') as HTMLButtonElement).disabled = busy || !text.canDelete;
    const problem = part('problem');
    const shown = this._problems.get(row.id) ?? row.problem ?? '';
    problem.textContent = shown;
    problem.hidden = !shown;
  }

  private _makeRow(id: string): HTMLLIElement {
    const node = el('li', 'gpucloud-Endpoint');
    node.dataset.gpucloudEndpoint = id;
    const top = el('div', 'gpucloud-Row-line');
    top.append(el('span', 'gpucloud-Endpoint-name'), el('span', 'gpucloud-Endpoint-status'));
    const middle = el('div', 'gpucloud-Row-line gpucloud-Endpoint-detail');
    middle.append(el('span', 'gpucloud-Endpoint-containers'), el('span', 'gpucloud-Endpoint-price'));
    const bottom = el('div', 'gpucloud-Row-line gpucloud-Endpoint-actions');
    for (const [action, label] of [
      ['start', 'Start'],
      ['stop', 'Stop'],
      ['delete', 'Delete']
    ] as [Action, string][]) {
      const button = el('button', `jp-Button jp-mod-minimal gpucloud-Endpoint-${action}`, label);
      button.addEventListener('click', () => void this._onClick(id, action));
      bottom.append(button);
    }
    const problem = el('p', 'gpucloud-Endpoint-problem');
    problem.setAttribute('role', 'alert');
    problem.hidden = true;
    node.append(top, middle, bottom, problem);
    return node;
  }

  private async _onClick(id: string, action: Action): Promise<void> {
    const row = endpointsOf(this._model.snapshot).find(item => item.id === id);
    const name = row?.name || id;
    if (action === 'delete') {
      const body = el('p', 'gpucloud-Confirm');
      body.textContent =
        `Delete endpoint ${name} (${id})? Its address stops answering and its containers go; ` +
        'billing stops once the cloud has deleted it.';
      const result = await showDialog({
        title: `Delete endpoint ${name}?`,
        body: new Widget({ node: body }),
        buttons: [Dialog.cancelButton(), Dialog.warnButton({ label: 'Delete' })]
      });
      if (!result.button.accept) {
        return;
      }
    }
    const node = this._rows.get(id);
    if (node) {
      node.dataset.busy = 'true';
      node.querySelectorAll('button').forEach(button => (button.disabled = true));
    }
    this._problems.delete(id);
    try {
      await requestAPI(`endpoints/${encodeURIComponent(id)}${action === 'delete' ? '' : `/${action}`}`, {
        method: action === 'delete' ? 'DELETE' : 'POST'
      });
    } catch (error) {
      const reason = error instanceof ApiError ? error.message : String(error);
      this._problems.set(id, `${name} was not ${action === 'stop' ? 'stopp' : action === 'start' ? 'start' : 'delet'}ed: ${reason}`);
    } finally {
      if (node) {
        delete node.dataset.busy;
      }
    }
    await this._model.refresh();
  }

  private _model: GpuCloudModel;
  private _total = el('span', 'gpucloud-Endpoints-total');
  private _error = el('p', 'gpucloud-Endpoints-error');
  private _list = el('ul', 'gpucloud-EndpointList');
  private _rows = new Map<string, HTMLLIElement>();
  private _problems = new Map<string, string>();
}
