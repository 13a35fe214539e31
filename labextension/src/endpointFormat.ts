/**
 * Pure formatting of the sidebar's endpoints (the cloud's inference instances): no DOM, so jest
 * tests it directly.
 *
 *     formatEndpoint(row)   // {status: "active", containers: "1/2 ready", price: "$0.35/h", ...}
 */

import { formatMoney } from './format';

/** One endpoint as `GET /gpucloud/instances` returns it in `endpoints`. */
export interface IEndpointRow {
  id: string;
  name: string;
  /** The appendix's status, upper case: NEW, DEPLOYING, ACTIVE, DISABLED (stopped), ... */
  status: string;
  ready: number;
  total: number;
  maxContainers: number;
  /** Per container-hour; `null` where the cloud shows no price. */
  hourlyPrice: number | null;
  /** What its containers cost now (price × containers). */
  hourly: number | null;
  hardwareName: string;
  address: string;
  problem: string | null;
}

/** The part of a snapshot the endpoints section reads. */
export interface IEndpointsSnapshot {
  endpoints?: IEndpointRow[];
  endpointsError?: string | null;
}

/** Statuses an endpoint can be stopped from (it is, or is becoming, served). */
const RUNNING = ['NEW', 'PENDING', 'DEPLOYING', 'PARTIALLYDEPLOYED', 'ACTIVE'];

/** What a row shows, and which of its buttons work. */
export interface IEndpointText {
  name: string;
  status: string;
  containers: string;
  price: string;
  priceTitle: string;
  canStart: boolean;
  canStop: boolean;
  canDelete: boolean;
}

/** The texts of one endpoint row. */
export function formatEndpoint(row: IEndpointRow): IEndpointText {
  const status = row.status.toUpperCase();
  const shown =
    status === 'DISABLED'
      ? 'stopped'
      : status === 'ACTIVE' && row.total === 0
        ? 'active, scaled to zero'
        : status.toLowerCase();
  const perContainer = row.hourlyPrice === null ? null : formatMoney(row.hourlyPrice);
  return {
    name: row.name || row.id,
    status: shown,
    containers: `${row.ready}/${row.total} ready`,
    price: row.hourly === null ? 'price not shown' : `${formatMoney(row.hourly)}/h`,
    priceTitle:
      perContainer === null
        ? 'The cloud shows no price for this hardware.'
        : `${perContainer}/h per container (${row.hardwareName || 'its hardware'}); ` +
          `up to ${formatMoney((row.hourlyPrice ?? 0) * row.maxContainers)}/h at ` +
          `${row.maxContainers} container${row.maxContainers === 1 ? '' : 's'}.`,
    canStart: status === 'DISABLED',
    canStop: RUNNING.includes(status),
    canDelete: status !== 'DELETING' && status !== 'DELETED'
  };
}

/** The section's heading line: how many endpoints and what they cost now. */
export function formatEndpointsTotal(rows: IEndpointRow[]): string {
  const hourly = rows.reduce((sum, row) => sum + (row.hourly ?? 0), 0);
  return `${rows.length} endpoint${rows.length === 1 ? '' : 's'} · ${formatMoney(hourly)}/h now`;
}
