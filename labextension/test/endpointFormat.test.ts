import { formatEndpoint, formatEndpointsTotal, IEndpointRow } from '../src/endpointFormat';

function row(fields: Partial<IEndpointRow> = {}): IEndpointRow {
  return {
    id: 'ep1',
    name: 'chat',
    status: 'ACTIVE',
    ready: 1,
    total: 2,
    maxContainers: 3,
    hourlyPrice: 0.75,
    hourly: 1.5,
    hardwareName: 'NVIDIA A10 24GB',
    address: 'http://127.0.0.1:1/inference/endpoints/ep1-x/',
    problem: null,
    ...fields
  };
}

describe('formatEndpoint', () => {
  it('shows status, containers ready over total and $/h now, with the price per container', () => {
    const text = formatEndpoint(row());
    expect([text.name, text.status, text.containers, text.price]).toEqual(['chat', 'active', '1/2 ready', '$1.50/h']);
    expect(text.priceTitle).toBe('$0.75/h per container (NVIDIA A10 24GB); up to $2.25/h at 3 containers.');
    expect([text.canStart, text.canStop, text.canDelete]).toEqual([false, true, true]);
  });

  it('says stopped for DISABLED, where only start and delete work', () => {
    const text = formatEndpoint(row({ status: 'DISABLED', ready: 0, total: 0, hourly: 0 }));
    expect([text.status, text.containers, text.price]).toEqual(['stopped', '0/0 ready', '$0.00/h']);
    expect([text.canStart, text.canStop, text.canDelete]).toEqual([true, false, true]);
  });

  it('says scaled to zero for an active endpoint without containers', () => {
    expect(formatEndpoint(row({ ready: 0, total: 0, hourly: 0 })).status).toBe('active, scaled to zero');
  });

  it('offers nothing while deleting, and says when the cloud shows no price', () => {
    const text = formatEndpoint(row({ status: 'DELETING', hourlyPrice: null, hourly: null, name: '' }));
    expect([text.name, text.price, text.canStart, text.canStop, text.canDelete]).toEqual([
      'ep1',
      'price not shown',
      false,
      false,
      false
    ]);
  });
});

describe('formatEndpointsTotal', () => {
  it('counts the endpoints and adds what they cost now', () => {
    expect(formatEndpointsTotal([row(), row({ id: 'ep2', hourly: null })])).toBe('2 endpoints · $1.50/h now');
    expect(formatEndpointsTotal([row({ hourly: 0.35 })])).toBe('1 endpoint · $0.35/h now');
  });
});
