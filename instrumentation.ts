// Next calls register() once when a server instance boots: boot this instance's services
// (the store in the database's layout, policy refresh, quota flushes, the sweeper). If the
// database is not reachable yet, the boot is retried by the first request that needs it.
export async function register(): Promise<void> {
  if (process.env.NEXT_RUNTIME !== 'nodejs') return;
  const { logEvent, services } = await import('./app/_lib/services');
  await services().catch((error: unknown) =>
    logEvent('error', 'services did not boot; retrying on first use', { reason: error instanceof Error ? error.message : 'unknown' }),
  );
}
