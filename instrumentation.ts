// Next calls register() once when a server instance boots: start this instance's
// background work (policy refresh, quota flushes, the sweeper) in the Node.js runtime.
export async function register(): Promise<void> {
  if (process.env.NEXT_RUNTIME !== 'nodejs') return;
  const { startServices } = await import('./app/_lib/services');
  await startServices();
}
