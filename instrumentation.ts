// Next calls register() once when a server instance boots: boot this instance's services
// (server/runtime.ts: the store in the database's layout, policy refresh, quota flushes, the
// sweeper). If the database is not reachable yet, the boot is retried by the first request that needs it.
export async function register(): Promise<void> {
  if (process.env.NEXT_RUNTIME !== 'nodejs') return;
  const [{ runtime }, { describeError, logger }] = await Promise.all([import('./app/_lib/runtime'), import('./server/logging')]);
  await runtime().catch((error: unknown) => {
    logger.error({ error: describeError(error) }, 'services did not boot; retrying on first use');
  });
}
