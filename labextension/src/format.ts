/**
 * Pure formatting for the sidebar and the status bar: no DOM, no JupyterLab, so jest tests it
 * directly.
 *
 *     formatPrice(1.234)                 // "$1.23"; formatPrice(0.00009) is "$0.00009"
 *     formatCountdown(deadline, now)     // "12:04" or "1:02:03", "due" once passed
 */

/** One instance as `GET /gpucloud/instances` returns it. */
export interface IInstanceRow {
  id: string;
  name: string;
  status: string;
  gpuModel: string;
  gpuCount: number;
  hourlyPrice: number;
  createdAt: string | null;
  billedFrom: string | null;
  spend: number;
  estimated: boolean;
  autoDeleteAt: string | null;
  /** Who keeps the auto-delete timer: "the sandbox service" or "the cloud". */
  autoDeleteBy?: string | null;
  sshCommand: string | null;
  /** The Dask cluster (`cloud.cluster`) the instance belongs to, if any. */
  cluster?: string | null;
  /** The GPU use measured over SSH (nvidia-smi), `null` before the first measure. */
  gpu?: IGpuUse | null;
  /** The idle clock of an instance launched with `delete_when_idle`. */
  idle?: IIdle | null;
  /** One sentence when an automatic delete of it was not seen within a minute. */
  deleteProblem?: string | null;
}

/** An instance's GPU use: the last measure and the last 10 minutes (`[unix s, util %]`). */
export interface IGpuUse {
  util: number;
  memoryMiB: number;
  measuredAt: number;
  stale: boolean;
  history: [number, number][];
}

/** An idle clock: its limit, how long idle, when it deletes, whether it warns. */
export interface IIdle {
  limitSeconds: number;
  idleSeconds: number;
  deleteAt: string;
  deletesIn: number;
  warning: boolean;
  halfway: boolean;
  by: string;
}

/** The totals of a snapshot. */
export interface ITotals {
  /** $/h now: GPU instances active or deleting, and the containers endpoints have up. */
  hourly: number;
  spend: number;
  running: number;
  committed: number;
  capReached: boolean;
  /** The endpoints' part of `hourly`. */
  endpointsHourly?: number;
  /** Endpoints with a container up. */
  serving?: number;
  /** The endpoints' part of `committed` (each at its most containers). */
  endpointsCommitted?: number;
}

/** This key's budget as a class gateway keeps it (`null` off a gateway). */
export interface IGateway {
  name: string;
  budget: number | null;
  spend: number;
  left: number | null;
  warning: boolean;
  /** The 80 % warning, or what was deleted when the budget was spent; '' otherwise. */
  sentence: string;
  /** The budget line as the server writes it: the key's budget left, then each live
   * instance's `create(..., budget=)` and its spend. */
  line?: string;
}

/** The sidebar's budget line through a gateway: the server's `line` (`Instance budgets: train
 * $0.40 of $5.00 spent`), else `$3.50 left of your $20.00 budget`. */
export function formatGatewayLeft(gateway: IGateway): string {
  if (gateway.line) {
    return gateway.line;
  }
  if (gateway.budget === null || gateway.left === null) {
    return `${formatMoney(gateway.spend)} spent; no budget on this key`;
  }
  return `${formatMoney(gateway.left)} left of your ${formatMoney(gateway.budget)} budget`;
}

/** The poller's snapshot, as `GET /gpucloud/instances` returns it. */
export interface ISnapshot {
  instances: IInstanceRow[];
  totals: ITotals;
  sandbox?: boolean | null;
  url?: string | null;
  cap?: number | null;
  polledAt?: string | null;
  error?: string | null;
  nextPollSeconds?: number;
  /** The sentences of automatic deletes not seen within a minute. */
  deleteProblems?: string[];
  /** This key's budget through a class gateway. */
  gateway?: IGateway | null;
}

/** One row, as text, ready for the sidebar. */
export interface IRowText {
  name: string;
  gpu: string;
  status: string;
  age: string;
  spend: string;
  countdown: string;
}

const BILLED = ['active', 'deleting'];

function parse(value: string | null | undefined): number | null {
  if (!value) {
    return null;
  }
  const ms = Date.parse(value);
  return Number.isNaN(ms) ? null : ms;
}

/**
 * A price as dollars, as Python's `gpucloud_nb.display.format_price` writes it: cents from
 * $0.10 up (with thousands separators), two significant digits below, never scientific
 * notation: `$2.49`, `$1,234.50`, `$0.00014`, `$0.00009`; `$0.00` for zero, `''` for a
 * number that is not finite.
 */
export function formatPrice(value: number): string {
  if (typeof value !== 'number' || !Number.isFinite(value)) {
    return '';
  }
  const magnitude = Math.abs(value);
  let text: string;
  if (magnitude >= 0.1 || magnitude === 0) {
    const [whole, cents] = magnitude.toFixed(2).split('.');
    text = `${whole.replace(/\B(?=(\d{3})+(?!\d))/g, ',')}.${cents}`;
  } else {
    const digits = Math.min(100, 1 - Math.floor(Math.log10(magnitude)));
    text = magnitude.toFixed(digits).replace(/0+$/, ''); // 0.000090 -> 0.00009
    if ((text.split('.')[1] ?? '').length < 2) {
      text = Number(text).toFixed(2); // 0.0999 rounds to 0.1: show cents, $0.10
    }
  }
  return value < 0 ? `-$${text}` : `$${text}`;
}

/** Money in the sidebar: {@link formatPrice}, and `$0.00` rather than nothing. */
export function formatMoney(value: number): string {
  return formatPrice(value) || '$0.00';
}

/** A duration in the largest sensible units: `45s`, `12m`, `3h 05m`, `2d 4h`. */
export function formatAge(seconds: number): string {
  const s = Math.max(0, Math.floor(seconds));
  if (s < 60) {
    return `${s}s`;
  }
  const minutes = Math.floor(s / 60);
  if (minutes < 60) {
    return `${minutes}m`;
  }
  const hours = Math.floor(minutes / 60);
  if (hours < 24) {
    return `${hours}h ${String(minutes % 60).padStart(2, '0')}m`;
  }
  return `${Math.floor(hours / 24)}d ${hours % 24}h`;
}

/**
 * Time left until `deadline` (ISO string) at `now` (ms): `m:ss` under an hour, `h:mm:ss` above,
 * `due` once passed, and an empty string without a deadline.
 */
export function formatCountdown(deadline: string | null, now: number): string {
  const due = parse(deadline);
  if (due === null) {
    return '';
  }
  const left = Math.ceil((due - now) / 1000);
  if (left <= 0) {
    return 'due';
  }
  const h = Math.floor(left / 3600);
  const m = Math.floor((left % 3600) / 60);
  const s = left % 60;
  const ss = String(s).padStart(2, '0');
  return h > 0 ? `${h}:${String(m).padStart(2, '0')}:${ss}` : `${m}:${ss}`;
}

/** `H100 × 2`; a model without a count shows alone. */
export function formatGpu(model: string, count: number): string {
  const name = model || 'GPU';
  return count > 0 ? `${name} × ${count}` : name;
}

/**
 * The spend of `row` at `now`: the server's figure at `polledAt`, plus the hourly price for
 * the time since while the instance is billed.
 */
export function spendAt(row: IInstanceRow, polledAt: string | null | undefined, now: number): number {
  const at = parse(polledAt);
  if (at === null || !BILLED.includes(row.status)) {
    return row.spend;
  }
  return row.spend + (row.hourlyPrice * Math.max(0, now - at)) / 3_600_000;
}

/** The texts of one sidebar row at `now` (ms since the epoch). */
export function formatRow(row: IInstanceRow, now: number, polledAt?: string | null): IRowText {
  const created = parse(row.createdAt);
  const spend = formatMoney(spendAt(row, polledAt, now));
  return {
    name: row.name || row.id,
    gpu: formatGpu(row.gpuModel, row.gpuCount),
    status: row.status,
    age: created === null ? '' : formatAge((now - created) / 1000),
    spend: row.estimated ? `≈${spend}` : spend,
    countdown: formatCountdown(row.autoDeleteAt, now)
  };
}

/**
 * The auto-delete line of `row` at `now`, saying who keeps the timer, with a longer title;
 * empty texts without a timer.
 */
export function formatAutoDelete(row: IInstanceRow, now: number): { text: string; title: string } {
  const left = formatCountdown(row.autoDeleteAt, now);
  if (!left) {
    return { text: '', title: '' };
  }
  const keeper = row.autoDeleteBy || 'the cloud';
  const text = left === 'due' ? `${keeper} deletes it now` : `${keeper} deletes it in ${left}`;
  const title =
    `Auto-delete at ${row.autoDeleteAt}: ${keeper} keeps this timer, so it fires ` +
    'whether or not a kernel runs.';
  return { text: text.charAt(0).toUpperCase() + text.slice(1), title };
}

/** The status bar's text: `$1.23/h · 2 running`, and `· 1 endpoint serving` while one has a
 * container up (its $/h is in the figure). */
export function formatStatus(totals: ITotals): string {
  const serving = totals.serving ?? 0;
  const endpoints = serving > 0 ? ` · ${serving} endpoint${serving === 1 ? '' : 's'} serving` : '';
  return `${formatMoney(totals.hourly)}/h · ${totals.running} running${endpoints}`;
}

/** The title of the sidebar's `$/h now`: what makes it up when endpoints are part of it. */
export function formatHourlyTitle(totals: ITotals): string {
  const endpoints = totals.endpointsHourly ?? 0;
  if (!(totals.serving ?? 0) && endpoints <= 0) {
    return 'GPU instances active or being deleted.';
  }
  return (
    `GPU instances ${formatMoney(totals.hourly - endpoints)}/h, endpoints ` +
    `${formatMoney(endpoints)}/h (the containers they have up; a stopped endpoint, or one ` +
    'scaled to zero, costs nothing).'
  );
}

/**
 * Why the status bar warns, as one sentence, or `null`: an automatic delete was not seen (the
 * status bar then turns red), the cost cap is reached, or an instance has been active for more
 * than `warnHours` hours.
 */
export function warning(snapshot: ISnapshot, warnHours: number, now: number): string | null {
  const problems = snapshot.deleteProblems ?? [];
  if (problems.length > 0) {
    return problems[0];
  }
  if (snapshot.gateway && snapshot.gateway.sentence) {
    return snapshot.gateway.sentence;
  }
  const cap = snapshot.cap;
  if (cap !== null && cap !== undefined && snapshot.totals.capReached) {
    const what = (snapshot.totals.endpointsCommitted ?? 0) > 0
      ? 'Pending and active instances, and endpoints at their most containers,'
      : 'Pending and active instances';
    return `${what} cost ${formatMoney(snapshot.totals.committed)}/h, at or above the cap of ${formatMoney(cap)}/h.`;
  }
  if (warnHours > 0) {
    for (const row of snapshot.instances) {
      const since = parse(row.billedFrom);
      if (row.status === 'active' && since !== null && now - since > warnHours * 3_600_000) {
        return `${row.name || row.id} has been active for ${formatAge((now - since) / 1000)}, over ${warnHours} h.`;
      }
    }
  }
  return null;
}

/** A Dask cluster's instances, shown under one heading. */
export interface IClusterGroup {
  cluster: string;
  rows: IInstanceRow[];
}

/**
 * The rows in the server's order, except that the instances of one cluster are gathered under
 * one group where its first instance stands; an instance of no cluster stays a row of its own.
 */
export function groupClusters(rows: IInstanceRow[]): Array<IInstanceRow | IClusterGroup> {
  const out: Array<IInstanceRow | IClusterGroup> = [];
  const groups = new Map<string, IClusterGroup>();
  for (const row of rows) {
    if (!row.cluster) {
      out.push(row);
      continue;
    }
    let group = groups.get(row.cluster);
    if (!group) {
      group = { cluster: row.cluster, rows: [] };
      groups.set(row.cluster, group);
      out.push(group);
    }
    group.rows.push(row);
  }
  return out;
}

/** A cluster's heading: its name and size, and what its instances bill now ($/h). */
export function formatCluster(group: IClusterGroup): { title: string; detail: string } {
  const n = group.rows.length;
  const hourly = group.rows
    .filter(row => BILLED.includes(row.status))
    .reduce((sum, row) => sum + row.hourlyPrice, 0);
  return {
    title: `${group.cluster} · Dask cluster`,
    detail: `${n} instance${n === 1 ? '' : 's'} · ${formatMoney(hourly)}/h`
  };
}

/** `57 % · 1.2 GiB` (memory in MiB below 1 GiB); `GPU use unknown` when stale; '' without. */
export function formatGpuUse(gpu: IGpuUse | null | undefined): string {
  if (!gpu) {
    return '';
  }
  if (gpu.stale) {
    return 'GPU use unknown';
  }
  const memory =
    gpu.memoryMiB >= 1024 ? `${(gpu.memoryMiB / 1024).toFixed(1)} GiB` : `${Math.round(gpu.memoryMiB)} MiB`;
  return `GPU ${Math.round(gpu.util)} % · ${memory}`;
}

/**
 * The sparkline of the last `span` seconds of utilisation as SVG polyline points in a
 * `width` × `height` box (0 % at the bottom, 100 % at the top); '' with fewer than 2 points.
 */
export function sparkline(
  history: [number, number][],
  nowSeconds: number,
  width = 60,
  height = 16,
  span = 600
): string {
  const points = history.filter(([at]) => at >= nowSeconds - span);
  if (points.length < 2) {
    return '';
  }
  return points
    .map(([at, util]) => {
      const x = width - ((nowSeconds - at) / span) * width;
      const y = height - (Math.min(Math.max(util, 0), 100) / 100) * height;
      return `${x.toFixed(1)},${y.toFixed(1)}`;
    })
    .join(' ');
}

/** Whole minutes, as the idle line says them: `25 min`, `1 h 05 min`. */
function minutes(seconds: number): string {
  const m = Math.floor(Math.max(0, seconds) / 60);
  return m >= 60 ? `${Math.floor(m / 60)} h ${String(m % 60).padStart(2, '0')} min` : `${m} min`;
}

/**
 * The idle line of a row at `now`: `idle 25 min, deletes in 5:00` once the warning is on,
 * `idle 16 min of 30` past half the limit, '' otherwise; `warn` says whether to show Keep.
 */
export function formatIdle(
  idle: IIdle | null | undefined,
  now: number,
  polledAt?: string | null
): { text: string; warn: boolean } {
  if (!idle) {
    return { text: '', warn: false };
  }
  const at = parse(polledAt);
  const idleFor = idle.idleSeconds + (at === null ? 0 : Math.max(0, now - at) / 1000);
  if (idle.warning) {
    const left = formatCountdown(idle.deleteAt, now);
    const when = left === 'due' ? 'deletes now' : `deletes in ${left}`;
    return { text: `idle ${minutes(idleFor)}, ${when}`, warn: true };
  }
  if (idle.halfway) {
    return { text: `idle ${minutes(idleFor)} of ${minutes(idle.limitSeconds)}`, warn: false };
  }
  return { text: '', warn: false };
}

/**
 * Spend as shown never goes down. Between two polls the sidebar adds the hourly price for the
 * time since; a poll that then bills an instance only up to its delete would take some back
 * ($0.0018, then $0.0014). `shown(key, value)` is `value`, or the most shown before under `key`
 * (an instance id, or `''` for the total); a new `scope` (another cloud) starts again.
 *
 *     const floor = new SpendFloor();
 *     floor.shown('i-1', 0.0018);   // 0.0018
 *     floor.shown('i-1', 0.0014);   // 0.0018
 */
export class SpendFloor {
  /** Forget every floor when the cloud changes. */
  scope(name: string): void {
    if (name !== this._scope) {
      this._scope = name;
      this._floors.clear();
    }
  }

  shown(key: string, value: number): number {
    const floor = Math.max(value, this._floors.get(key) ?? value);
    this._floors.set(key, floor);
    return floor;
  }

  private _scope = '';
  private _floors = new Map<string, number>();
}
