import { Notification } from '@jupyterlab/apputils';
import { ISignal, Signal } from '@lumino/signaling';

import { ApiError, requestAPI } from './api';
import { ISnapshot } from './format';

/** How often a tab reads the server's cached snapshot (cheap: the server does not poll for it). */
const READ_MS = 1000;

/**
 * The GPU-cloud state of this tab: the server poller's latest snapshot, re-read every
 * second, plus a one-second tick for countdowns. Widgets listen to `changed`.
 */
export class GpuCloudModel {
  snapshot: ISnapshot | null = null;
  error: string | null = null;
  busyInterval = 5;
  idleInterval = 30;
  warnAfterHours = 4;

  get changed(): ISignal<this, void> {
    return this._changed;
  }

  start(): void {
    if (this._timer === null) {
      void this.refresh();
      this._timer = window.setInterval(() => void this.refresh(), READ_MS);
      this._tick = window.setInterval(() => this._changed.emit(), 1000);
    }
  }

  dispose(): void {
    if (this._timer !== null) {
      window.clearInterval(this._timer);
      window.clearInterval(this._tick!);
      this._timer = this._tick = null;
    }
  }

  /** Read the snapshot now (a read changes nothing on the server). */
  async refresh(): Promise<void> {
    try {
      this.snapshot = await requestAPI<ISnapshot>('instances');
      this.error = null;
      this._notifyIdle();
    } catch (error) {
      this.error = error instanceof ApiError ? error.message : 'The GPU cloud could not be read.';
    }
    this._changed.emit();
  }

  /** Send this tab's interval settings to the one server poller (they loaded or changed). */
  async sendSettings(): Promise<void> {
    try {
      await requestAPI('settings', {
        method: 'PUT',
        body: JSON.stringify({ busyInterval: this.busyInterval, idleInterval: this.idleInterval })
      });
    } catch (error) {
      this.error = error instanceof ApiError ? error.message : 'The settings could not be sent.';
      this._changed.emit();
    }
  }

  /** Ask the server to poll the cloud soon (a notebook cell just ran). */
  async nudge(): Promise<void> {
    try {
      await requestAPI('refresh', { method: 'POST' });
    } catch {
      // the next regular read shows any problem
    }
  }

  /** What deleting `id` loses, as one sentence. */
  async fate(id: string): Promise<string> {
    const data = await requestAPI<{ fate: string }>(`instances/${encodeURIComponent(id)}`);
    return data.fate;
  }

  /** Delete `id` in the cloud, then re-read the snapshot. */
  /** Install the kernelspec that runs a notebook on instance `id`; its name and title. */
  async installKernel(id: string): Promise<{ name: string; displayName: string }> {
    return requestAPI<{ name: string; displayName: string }>(
      `instances/${encodeURIComponent(id)}/kernel`,
      { method: 'POST' }
    );
  }

  async remove(id: string): Promise<void> {
    await requestAPI(`instances/${encodeURIComponent(id)}`, { method: 'DELETE' });
    await this.refresh();
  }

  /** Start the idle clock of `id` again (the Keep button), then re-read the snapshot. */
  async keep(id: string): Promise<void> {
    await requestAPI(`instances/${encodeURIComponent(id)}/keep`, { method: 'POST' });
    this._warned.delete(id);
    await this.refresh();
  }

  /** One JupyterLab notification, with Keep, when an instance's idle warning starts. */
  private _notifyIdle(): void {
    const warned = new Set<string>();
    for (const row of this.snapshot?.instances ?? []) {
      if (!row.idle?.warning) {
        continue;
      }
      warned.add(row.id);
      if (this._warned.has(row.id)) {
        continue;
      }
      const name = row.name || row.id;
      const minutes = Math.floor(row.idle.idleSeconds / 60);
      Notification.warning(
        `${name} has been idle ${minutes} min; ${row.idle.by} deletes it in ` +
          `${Math.max(0, Math.round(row.idle.deletesIn / 60))} min unless it is used or kept.`,
        {
          autoClose: false,
          actions: [{ label: 'Keep', callback: () => void this.keep(row.id) }]
        }
      );
    }
    this._warned = warned;
  }

  private _warned = new Set<string>();
  private _changed = new Signal<this, void>(this);
  private _timer: number | null = null;
  private _tick: number | null = null;
}
