'use client';
// The cells that name one key attempt in the /keys lists (unrecorded completions, reconciliation
// findings): service and scope, principal, the key (which opens its audited lookup) and the
// attempt's correlation id. Metadata only, as the lists themselves.

export interface KeyIdentity {
  principalId: string;
  service: string;
  scope: string;
  key: string;
  correlationId: string;
}

export function KeyIdentityCells<Row extends KeyIdentity>({ row, onOpen }: { row: Row; onOpen: (row: Row) => void }) {
  return (
    <>
      <td data-label="Service and scope">
        {row.service}, {row.scope}
      </td>
      <td data-label="Principal">
        <code>{row.principalId}</code>
      </td>
      <td data-label="Idempotency key">
        <button type="button" className="link" onClick={() => onOpen(row)}>
          <code>{row.key}</code>
        </button>
      </td>
      <td data-label="Correlation id">
        <code>{row.correlationId}</code>
      </td>
    </>
  );
}
