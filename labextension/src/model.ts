import { Notification } from '@jupyterlab/apputils';
import { ISignal, Signal } from '@lumino/signaling';

import { ApiError, requestAPI } from './api';
import { ISnapshot } from './format';

/** How often a tab reads the server's cached snapshot (cheap: the server does not poll for it). */
const READ_MS = 1000;
/** How long the "was deleted" note of an idle warning stays up. */
const DELETED_NOTE_MS = 8000;

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

  /** Instances that were listed and are now deleting or gone (their kernelspecs are removed). */
  get gone(): ISignal<this, string[]> {
    return this._gone;
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
      this._noticeGone();
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
    const toast = this._warned.get(id);
    if (toast) {
      Notification.dismiss(toast.notice); // kept from the sidebar: the warning is over
      this._warned.delete(id);
    }
    await this.refresh();
  }

  /**
   * One JupyterLab notification, with Keep, when an instance's idle warning starts. When the
   * warning ends it goes: taken down at once if the instance was kept or used, or, once the
   * instance is deleted, turned into a short "was deleted" note without Keep.
   */
  private _notifyIdle(): void {
    const rows = new Map((this.snapshot?.instances ?? []).map(row => [row.id, row]));
    for (const row of rows.values()) {
      if (!row.idle?.warning || this._warned.has(row.id)) {
        continue;
      }
      const name = row.name || row.id;
      const minutes = Math.floor(row.idle.idleSeconds / 60);
      const notice = Notification.warning(
        `${name} has been idle ${minutes} min; ${row.idle.by} deletes it in ` +
          `${Math.max(0, Math.round(row.idle.deletesIn / 60))} min unless it is used or kept.`,
        {
          autoClose: false,
          actions: [{ label: 'Keep', callback: () => void this._keepFromToast(row.id, name) }]
        }
      );
      this._warned.set(row.id, { notice, name, by: row.idle.by });
    }
    for (const [id, toast] of this._warned) {
      const row = rows.get(id);
      if (row && row.status !== 'deleting' && row.status !== 'deleted' && row.idle?.warning) {
        continue;
      }
      this._warned.delete(id);
      if (row && row.status !== 'deleting' && row.status !== 'deleted') {
        Notification.dismiss(toast.notice); // kept, or used again
      } else {
        Notification.update({
          id: toast.notice,
          message: `${toast.name} was deleted: it stayed idle, so ${toast.by} deleted it.`,
          type: 'info',
          autoClose: DELETED_NOTE_MS,
          actions: []
        });
      }
    }
  }

  /** Keep, from the toast: a failure (the instance is gone) says so in a toast of its own. */
  private async _keepFromToast(id: string, name: string): Promise<void> {
    try {
      await this.keep(id);
    } catch (error) {
      Notification.error(`${name} was not kept: ${error instanceof Error ? error.message : String(error)}`, {
        autoClose: DELETED_NOTE_MS
      });
    }
  }

  /**
   * Emit `gone` with the instances that turned deleting or left the list since the last read
   * (both: the server removes a kernelspec at the first poll that lists its instance deleting or
   * deleted, which may come after a delete from the sidebar already shows "deleting").
   */
  private _noticeGone(): void {
    const rows = this.snapshot?.instances ?? [];
    const listed = new Set(rows.map(row => row.id));
    const live = new Set(rows.filter(row => row.status !== 'deleting').map(row => row.id));
    const gone = new Set([
      ...[...this._live].filter(id => !live.has(id)),
      ...[...this._listed].filter(id => !listed.has(id))
    ]);
    this._live = live;
    this._listed = listed;
    if (gone.size) {
      this._gone.emit([...gone]);
    }
  }

  private _warned = new Map<string, { notice: string; name: string; by: string }>();
  private _live = new Set<string>();
  private _listed = new Set<string>();
  private _gone = new Signal<this, string[]>(this);
  private _changed = new Signal<this, void>(this);
  private _timer: number | null = null;
  private _tick: number | null = null;
}
