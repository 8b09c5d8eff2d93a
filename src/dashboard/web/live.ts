// The live events of the control plane (FleetService.StreamEvents, server streaming through
// connect-web): one stream per page load, shared by every subscriber. It starts after the last
// event kept (it catches up without following first, so history is not replayed as news) and,
// after a dropped connection, resumes after the last event it saw, so no event is missed. The
// newest events it read, history included, are kept for the Events page to open with.
import type { StreamEventsResponse } from "../../../gen/forelead/admin/v1/fleet_pb.js";
import { fleet } from "./clients.js";

/** One event as the stream delivers it. */
export type LiveEvent = StreamEventsResponse;
/** Called with each event; `types` empty = every type. */
export type LiveListener = (event: LiveEvent) => void;

/** The state of the stream: pages may show it (e.g. "live" / "reconnecting"). */
export type LiveState = "connecting" | "live" | "reconnecting";

const listeners = new Set<{ types: readonly string[]; fn: LiveListener }>();
const stateListeners = new Set<(s: LiveState) => void>();
let state: LiveState = "connecting";
let started = false;
let lastId = 0n;

function setState(next: LiveState): void {
  if (next === state) return;
  state = next;
  for (const fn of stateListeners) fn(state);
}

const catchUpPage = 10_000;

/** How many of the newest events are kept for recentEvents(). */
export const recentKept = 500;
let recent: LiveEvent[] = [];

function remember(e: LiveEvent): void {
  recent.push(e);
  // Trimmed in chunks: a catch-up through a long history stays linear.
  if (recent.length >= 2 * recentKept) recent = recent.slice(-recentKept);
}

/** The newest events read (at most recentKept), history before this page load included; oldest first. */
export function recentEvents(): readonly LiveEvent[] {
  return recent.length > recentKept ? recent.slice(-recentKept) : recent;
}

function deliver(e: LiveEvent): void {
  lastId = e.id;
  remember(e);
  for (const l of listeners) if (l.types.length === 0 || l.types.includes(e.type)) l.fn(e);
}

/**
 * Reads (without following) from lastId to the end, page by page: on the first connection to skip
 * the history kept (not delivered: it is not news), after a reconnection to deliver what happened
 * while the stream was down. Its end is the moment the stream is known to be up.
 */
async function catchUp(first: boolean): Promise<void> {
  for (;;) {
    let n = 0;
    for await (const e of fleet.streamEvents({ afterId: lastId, pageSize: catchUpPage })) {
      n++;
      if (first) {
        lastId = e.id;
        remember(e);
      } else deliver(e);
    }
    if (n < catchUpPage) return;
  }
}

async function run(): Promise<void> {
  let delay = 500;
  let first = true;
  for (;;) {
    try {
      await catchUp(first);
      first = false;
      setState("live");
      delay = 500;
      for await (const e of fleet.streamEvents({ afterId: lastId, follow: true })) deliver(e);
    } catch {
      // Dropped (the control plane restarted, the dashboard stopped, the network): resume after
      // lastId.
    }
    setState("reconnecting");
    await new Promise((r) => setTimeout(r, delay));
    delay = Math.min(delay * 2, 10_000);
  }
}

/** Subscribes `fn` to the events of `types` (all when empty); returns the unsubscribe. */
export function subscribe(types: readonly string[], fn: LiveListener): () => void {
  const entry = { types, fn };
  listeners.add(entry);
  start();
  return () => listeners.delete(entry);
}

function start(): void {
  if (started) return;
  started = true;
  void run();
}

/**
 * Subscribes to the stream's state (starting the stream: the shell shows it on every page); returns
 * the unsubscribe.
 */
export function onLiveState(fn: (s: LiveState) => void): () => void {
  start();
  stateListeners.add(fn);
  fn(state);
  return () => stateListeners.delete(fn);
}
