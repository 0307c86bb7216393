'use client';
// A time as the operator reads it, in their locale and time zone. The server cannot know the
// browser's zone, so the server render and hydration show UTC, then the local time; rendering
// local time on the server would show the server's zone, or a hydration mismatch.
import { useSyncExternalStore } from 'react';
import { formatDateTime } from './overview/format';

const subscribe = () => () => undefined;

/** False during the server render and hydration, true after. */
export function useHydrated(): boolean {
  return useSyncExternalStore(
    subscribe,
    () => true,
    () => false,
  );
}

const dateFormat = () => new Intl.DateTimeFormat(undefined, { dateStyle: 'medium' });
const timeFormat = () => new Intl.DateTimeFormat(undefined, { timeStyle: 'medium' });

/** `stacked`: the date above the time, for a narrow table column. */
export function LocalTime({ iso, stacked = false }: { iso: string; stacked?: boolean }) {
  const hydrated = useHydrated();
  if (!stacked) {
    return (
      <time dateTime={iso} title={iso}>
        {hydrated ? formatDateTime(iso) : `${iso.slice(0, 16).replace('T', ' ')} UTC`}
      </time>
    );
  }
  const date = new Date(iso);
  return (
    <time dateTime={iso} title={iso}>
      {hydrated ? dateFormat().format(date) : iso.slice(0, 10)}{' '}
      <br />
      {hydrated ? timeFormat().format(date) : `${iso.slice(11, 19)} UTC`}
    </time>
  );
}

/** Hours and minutes alone ("14:05"), for a time within the last hour. */
export function LocalClock({ iso }: { iso: string }) {
  const hydrated = useHydrated();
  return (
    <time dateTime={iso} title={iso}>
      {hydrated ? new Intl.DateTimeFormat(undefined, { hour: '2-digit', minute: '2-digit' }).format(new Date(iso)) : `${iso.slice(11, 16)} UTC`}
    </time>
  );
}
