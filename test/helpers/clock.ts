// For tests whose rows are placed relative to the current minute or step (date_trunc, date_bin of
// now()) and whose assertions hold only while that minute or step lasts: wait, when less than
// `needSeconds` of it remain, until the next one has begun. The machine's clock is the database's
// (a loopback server), so the wall clock says when its now() crosses.
export async function awaitStepRoom(needSeconds: number, stepSeconds = 60): Promise<void> {
  const stepMs = stepSeconds * 1000;
  const left = stepMs - (Date.now() % stepMs);
  if (left < needSeconds * 1000) await new Promise((done) => setTimeout(done, left + 250));
}
