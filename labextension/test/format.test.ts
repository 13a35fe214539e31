import {
  formatAutoDelete,
  formatAge,
  formatCluster,
  formatCountdown,
  formatGatewayLeft,
  formatGpu,
  formatGpuUse,
  formatHourlyTitle,
  formatIdle,
  formatMoney,
  formatPrice,
  formatRow,
  formatStatus,
  groupClusters,
  IClusterGroup,
  IInstanceRow,
  ISnapshot,
  sparkline,
  SpendFloor,
  warning
} from '../src/format';

// jest runs in Node; the package has no Node typings.
declare const process: { env: Record<string, string | undefined> };

const NOW = Date.parse('2026-11-24T10:00:00Z');

function row(extra: Partial<IInstanceRow> = {}): IInstanceRow {
  return {
    id: 'i-1',
    name: 'train-1',
    status: 'active',
    gpuModel: 'H100',
    gpuCount: 2,
    hourlyPrice: 2.5,
    createdAt: '2026-11-24T08:55:00Z',
    billedFrom: '2026-11-24T09:00:00Z',
    spend: 2.5,
    estimated: false,
    autoDeleteAt: null,
    sshCommand: 'ssh ubuntu@127.0.0.1',
    ...extra
  };
}

describe('formatPrice', () => {
  it('writes cents from $0.10 up and two significant digits below, like format_price', () => {
    expect(formatPrice(2.49)).toBe('$2.49');
    expect(formatPrice(1234.5)).toBe('$1,234.50');
    expect(formatPrice(1234567.891)).toBe('$1,234,567.89');
    expect(formatPrice(0.1)).toBe('$0.10');
    expect(formatPrice(0.099)).toBe('$0.099');
    expect(formatPrice(0.00014)).toBe('$0.00014');
    expect(formatPrice(0.00009)).toBe('$0.00009');
    expect(formatPrice(0.001)).toBe('$0.001');
    expect(formatPrice(1e-9)).toBe('$0.000000001');
    expect(formatPrice(0)).toBe('$0.00');
    expect(formatPrice(-0.5)).toBe('-$0.50');
    expect(formatPrice(NaN)).toBe('');
    expect(formatPrice(Infinity)).toBe('');
  });
  it('never writes scientific notation', () => {
    for (const value of [1e-7, 3.3e-12, 5e-21, 9.99e-5]) {
      expect(formatPrice(value)).not.toMatch(/e/i);
    }
  });
  it("matches Python's format_price on every case pytest sends", () => {
    // tests/test_labextension_js.py puts [value, format_price(value)] pairs here.
    const cases: [number, string][] = JSON.parse(process.env.GPUCLOUD_PRICE_CASES || '[]');
    if (process.env.CI === 'true') {
      expect(cases.length).toBeGreaterThan(0);
    }
    for (const [value, python] of cases) {
      expect([value, formatPrice(value)]).toEqual([value, python]);
    }
  });
});

describe('formatMoney', () => {
  it('shows dollars like formatPrice, and $0.00 for nothing', () => {
    expect(formatMoney(1.234)).toBe('$1.23');
    expect(formatMoney(0)).toBe('$0.00');
    expect(formatMoney(0.001)).toBe('$0.001');
    expect(formatMoney(NaN)).toBe('$0.00');
  });
});

describe('formatAutoDelete', () => {
  it('says who keeps the timer, and nothing without one', () => {
    const sandbox = row({ autoDeleteAt: '2026-11-24T10:12:04Z', autoDeleteBy: 'the sandbox service' });
    expect(formatAutoDelete(sandbox, NOW).text).toBe('The sandbox service deletes it in 12:04');
    expect(formatAutoDelete(sandbox, NOW).title).toMatch(/the sandbox service keeps this timer/);
    const cloud = row({ autoDeleteAt: '2026-11-24T09:00:00Z', autoDeleteBy: 'the cloud' });
    expect(formatAutoDelete(cloud, NOW).text).toBe('The cloud deletes it now');
    expect(formatAutoDelete(row(), NOW)).toEqual({ text: '', title: '' });
  });
});

describe('formatAge', () => {
  it('uses the largest sensible units', () => {
    expect(formatAge(45)).toBe('45s');
    expect(formatAge(12 * 60 + 5)).toBe('12m');
    expect(formatAge(3 * 3600 + 5 * 60)).toBe('3h 05m');
    expect(formatAge(2 * 86400 + 4 * 3600)).toBe('2d 4h');
    expect(formatAge(-3)).toBe('0s');
  });
});

describe('formatCountdown', () => {
  it('counts down in m:ss under an hour', () => {
    expect(formatCountdown('2026-11-24T10:12:04Z', NOW)).toBe('12:04');
    expect(formatCountdown('2026-11-24T10:00:01Z', NOW)).toBe('0:01');
  });
  it('counts down in h:mm:ss above an hour', () => {
    expect(formatCountdown('2026-11-24T11:02:03Z', NOW)).toBe('1:02:03');
  });
  it('ticks: one second later shows one second less', () => {
    const deadline = '2026-11-24T10:01:00Z';
    expect(formatCountdown(deadline, NOW)).toBe('1:00');
    expect(formatCountdown(deadline, NOW + 1000)).toBe('0:59');
  });
  it('says due once the deadline has passed, and nothing without one', () => {
    expect(formatCountdown('2026-11-24T09:59:59Z', NOW)).toBe('due');
    expect(formatCountdown('2026-11-24T10:00:00Z', NOW)).toBe('due');
    expect(formatCountdown(null, NOW)).toBe('');
    expect(formatCountdown('not a date', NOW)).toBe('');
  });
});

describe('formatRow', () => {
  it('formats every column of an active instance', () => {
    const text = formatRow(row({ autoDeleteAt: '2026-11-24T10:30:00Z' }), NOW);
    expect(text).toEqual({
      name: 'train-1',
      gpu: 'H100 × 2',
      status: 'active',
      age: '1h 05m',
      spend: '$2.50',
      countdown: '30:00'
    });
  });
  it('adds the spend since the poll while billed, not while pending', () => {
    const polledAt = '2026-11-24T09:00:00Z'; // an hour before NOW at $2.50/h
    expect(formatRow(row(), NOW, polledAt).spend).toBe('$5.00');
    expect(formatRow(row({ status: 'pending', spend: 0 }), NOW, polledAt).spend).toBe('$0.00');
  });
  it('marks an estimated spend and falls back to the id for a nameless instance', () => {
    const text = formatRow(row({ name: '', estimated: true }), NOW);
    expect(text.name).toBe('i-1');
    expect(text.spend).toBe('≈$2.50');
  });
  it('shows a GPU model without a count alone', () => {
    expect(formatGpu('A100', 0)).toBe('A100');
    expect(formatGpu('', 1)).toBe('GPU × 1');
  });
});

describe('status bar', () => {
  const snapshot = (extra: Partial<ISnapshot> = {}): ISnapshot => ({
    instances: [row()],
    totals: { hourly: 1.234, spend: 2.5, running: 2, committed: 1.234, capReached: false },
    cap: null,
    ...extra
  });
  it('reads "$1.23/h · 2 running"', () => {
    expect(formatStatus(snapshot().totals)).toBe('$1.23/h · 2 running');
  });
  it("adds the endpoints serving, whose $/h is in the figure, and says so in the sidebar's title", () => {
    const totals = { ...snapshot().totals, hourly: 1.984, endpointsHourly: 0.75, serving: 1 };
    expect(formatStatus(totals)).toBe('$1.98/h · 2 running · 1 endpoint serving');
    expect(formatStatus({ ...totals, serving: 2, endpointsHourly: 1.5 })).toBe(
      '$1.98/h · 2 running · 2 endpoints serving');
    expect(formatHourlyTitle(totals)).toBe(
      'GPU instances $1.23/h, endpoints $0.75/h (the containers they have up; a stopped ' +
      'endpoint, or one scaled to zero, costs nothing).');
    // scaled to zero or stopped: nothing serving, nothing added
    expect(formatStatus({ ...totals, hourly: 1.234, endpointsHourly: 0, serving: 0 })).toBe(
      '$1.23/h · 2 running');
    expect(formatHourlyTitle(snapshot().totals)).toBe('GPU instances active or being deleted.');
  });
  it('names endpoints in the cap warning when they count towards it', () => {
    const totals = { ...snapshot().totals, capReached: true, committed: 2.734, endpointsCommitted: 1.5 };
    expect(warning(snapshot({ cap: 2, totals }), 0, NOW)).toBe(
      'Pending and active instances, and endpoints at their most containers, cost $2.73/h, at ' +
      'or above the cap of $2.00/h.');
  });
  it('warns when the cap is reached', () => {
    const s = snapshot({ cap: 1, totals: { ...snapshot().totals, capReached: true } });
    expect(warning(s, 0, NOW)).toMatch(/cap of \$1\.00\/h/);
  });
  it('warns when an instance has been active over the set hours, and not before', () => {
    expect(warning(snapshot(), 0.5, NOW)).toMatch(/train-1 has been active for 1h 00m, over 0.5 h/);
    expect(warning(snapshot(), 2, NOW)).toBeNull();
    expect(warning(snapshot(), 0, NOW)).toBeNull();
  });
  it('through a gateway, shows the budget left and its sentence', () => {
    const gateway = {
      name: 'Ada', budget: 20, spend: 16.5, left: 3.5, warning: true,
      sentence: 'You have spent $16.50 of your budget of $20.00 (82 %); $3.50 is left.'
    };
    expect(formatGatewayLeft(gateway)).toBe('$3.50 left of your $20.00 budget');
    expect(warning(snapshot({ gateway }), 0, NOW)).toBe(gateway.sentence);
    expect(formatGatewayLeft({ ...gateway, budget: null, left: null, sentence: '' })).toBe(
      '$16.50 spent; no budget on this key');
    const line = 'Instance budgets: eval $0.10 of $2.00 spent, train $0.40 of $5.00 spent';
    expect(formatGatewayLeft({ ...gateway, budget: null, left: null, line })).toBe(line);
    expect(warning(snapshot({ gateway: { ...gateway, sentence: '' } }), 0, NOW)).toBeNull();
  });
});

describe('groupClusters', () => {
  it("gathers a cluster's instances where its first one stands and keeps the others' order", () => {
    const rows = [
      row({ id: 'a', name: 'solo' }),
      row({ id: 'b', name: 'trio-0', cluster: 'trio' }),
      row({ id: 'c', name: 'other' }),
      row({ id: 'd', name: 'trio-1', cluster: 'trio' })
    ];
    const grouped = groupClusters(rows);
    expect(grouped.map(item => ('rows' in item ? `[${item.cluster}]` : item.id))).toEqual([
      'a',
      '[trio]',
      'c'
    ]);
    expect((grouped[1] as IClusterGroup).rows.map(r => r.id)).toEqual(['b', 'd']);
  });
  it('leaves rows of no cluster alone', () => {
    const rows = [row({ id: 'a' }), row({ id: 'b', cluster: null })];
    expect(groupClusters(rows)).toEqual(rows);
  });
});

describe('formatCluster', () => {
  it("names the cluster, its size and the $/h its billed instances cost", () => {
    const group: IClusterGroup = {
      cluster: 'trio',
      rows: [row({ hourlyPrice: 2.5 }), row({ hourlyPrice: 2.5 }), row({ hourlyPrice: 2.5, status: 'pending' })]
    };
    expect(formatCluster(group)).toEqual({ title: 'trio · Dask cluster', detail: '3 instances · $5.00/h' });
    expect(formatCluster({ cluster: 'one', rows: [row()] }).detail).toBe('1 instance · $2.50/h');
  });
});

describe('GPU use and the idle clock (#28)', () => {
  const idle = {
    limitSeconds: 1800, idleSeconds: 1500, deleteAt: '2026-11-24T10:05:00Z', deletesIn: 300,
    warning: true, halfway: true, by: 'the sandbox service'
  };
  it('reads utilisation and memory, and says so when the measure is stale', () => {
    const gpu = { util: 57.4, memoryMiB: 1210, measuredAt: 0, stale: false, history: [] as [number, number][] };
    expect(formatGpuUse(gpu)).toBe('GPU 57 % · 1.2 GiB');
    expect(formatGpuUse({ ...gpu, memoryMiB: 300 })).toBe('GPU 57 % · 300 MiB');
    expect(formatGpuUse({ ...gpu, stale: true })).toBe('GPU use unknown');
    expect(formatGpuUse(null)).toBe('');
  });
  it('draws the last 10 minutes, 100 % at the top, and nothing from one point', () => {
    const now = 10_000;
    expect(sparkline([[now - 600, 0], [now, 100]], now)).toBe('0.0,16.0 60.0,0.0');
    expect(sparkline([[now - 900, 50], [now, 50]], now)).toBe('');
  });
  it('warns five minutes before the delete, and says half-way before that', () => {
    expect(formatIdle(idle, NOW)).toEqual({ text: 'idle 25 min, deletes in 5:00', warn: true });
    const half = { ...idle, idleSeconds: 960, warning: false };
    expect(formatIdle(half, NOW)).toEqual({ text: 'idle 16 min of 30 min', warn: false });
    expect(formatIdle({ ...half, halfway: false }, NOW).text).toBe('');
  });
  it('puts an unconfirmed delete first in the status bar', () => {
    const s: ISnapshot = {
      instances: [row()], deleteProblems: ['train-1 was to be deleted ... delete it by hand.'],
      totals: { hourly: 1, spend: 1, running: 1, committed: 1, capReached: true }, cap: 0.5
    };
    expect(warning(s, 0, NOW)).toBe('train-1 was to be deleted ... delete it by hand.');
  });
});

describe('SpendFloor', () => {
  it('never shows a spend lower than it showed, per instance and for the total', () => {
    const floor = new SpendFloor();
    floor.scope('http://127.0.0.1:1');
    expect(floor.shown('i-1', 0.0018)).toBe(0.0018);
    expect(floor.shown('i-1', 0.0014)).toBe(0.0018);
    expect(floor.shown('', 0.5)).toBe(0.5);
    expect(floor.shown('i-2', 0.001)).toBe(0.001);
    expect(floor.shown('i-1', 0.002)).toBe(0.002);
    expect(floor.shown('', 0.4)).toBe(0.5);
  });

  it('starts again for another cloud', () => {
    const floor = new SpendFloor();
    floor.scope('a');
    floor.shown('', 3);
    floor.scope('b');
    expect(floor.shown('', 1)).toBe(1);
  });
});
