// Hostile traffic beside every fault's load: server action and RSC requests the dashboard must
// refuse (a foreign or null Origin, a made-up action id, a broken multipart body), sent to the
// instances in turn. Refused before Next and without the database, each must be a 403 or 400
// whatever the fault: a 5xx among them fails the fault like any other 500.
import type { Instance } from './instances';

export interface RefusedActions {
  /** Stops sending; resolves with every answer's status (0 for a connection error, as the load counts them). */
  stop(): Promise<number[]>;
}

const MADE_UP_ID = `7f${'0'.repeat(40)}`;

function refusedRequest(turn: number, baseUrl: string): { path: string; init: RequestInit } {
  const text = { 'content-type': 'text/plain;charset=UTF-8', accept: 'text/x-component' };
  switch (turn % 5) {
    case 0:
      return { path: '/login', init: { method: 'POST', headers: { ...text, origin: 'http://evil.example', 'next-action': MADE_UP_ID }, body: '[]' } };
    case 1:
      return { path: '/login', init: { method: 'POST', headers: { ...text, origin: 'null', 'next-action': MADE_UP_ID }, body: '[]' } };
    case 2:
      return { path: '/login', init: { method: 'POST', headers: { ...text, origin: baseUrl, 'next-action': MADE_UP_ID }, body: '[]' } };
    case 3:
      return {
        path: '/login',
        init: { method: 'POST', headers: { origin: baseUrl, accept: 'text/html', 'content-type': 'multipart/form-data; boundary=refused-7d' }, body: '--refused-7d\r\nContent-Disposition: form-data; name="a"\r\n\r\nno end' },
      };
    default:
      return { path: '/keys', init: { method: 'GET', headers: { origin: 'http://evil.example', rsc: '1' } } };
  }
}

export function startRefusedActions(instances: readonly Instance[], pauseMs = 50): RefusedActions {
  const statuses: number[] = [];
  const state = { running: true };
  const done = (async () => {
    for (let turn = 0; state.running; turn++) {
      const instance = instances[turn % instances.length];
      if (!instance) return;
      const { path, init } = refusedRequest(turn, instance.baseUrl);
      try {
        const response = await fetch(`${instance.baseUrl}${path}`, { ...init, redirect: 'manual', signal: AbortSignal.timeout(10_000) });
        await response.arrayBuffer();
        statuses.push(response.status);
      } catch {
        statuses.push(0);
      }
      await new Promise((resume) => setTimeout(resume, pauseMs));
    }
  })();
  return {
    stop: async () => {
      state.running = false;
      await done;
      return statuses;
    },
  };
}
