import { logUnlessUnreachable } from "../../store/unreachable.js";

/** The ticker that fires schedules; close() stops it and waits for a tick in flight. */
export interface ScheduleTicker {
  close(): Promise<void>;
}

/**
 * Runs `tick` once at start (so missed due times are applied at start) and then every `everyMs`,
 * paced to just after each whole second so a seconds-field schedule fires promptly (due-ness is
 * the database clock's; this only paces). Ticks never overlap. A failing tick is logged once, not
 * every second, and its recovery once.
 */
export function startScheduleTicker(tick: () => Promise<unknown>, everyMs = 1000): ScheduleTicker {
  let closed = false;
  let failing = false;
  let timer: NodeJS.Timeout | undefined;
  let running: Promise<void> = Promise.resolve();
  const run = async () => {
    try {
      await tick();
      if (failing) console.log("forelead: schedules fire again");
      failing = false;
    } catch (err) {
      if (!failing)
        logUnlessUnreachable("forelead: firing schedules failed (retried each tick)", err);
      failing = true;
    }
  };
  const schedule = () => {
    if (closed) return;
    const delay = everyMs >= 1000 ? everyMs - (Date.now() % 1000) + 20 : everyMs;
    timer = setTimeout(() => {
      running = run().then(schedule);
    }, delay);
    timer.unref();
  };
  running = run().then(schedule);
  return {
    async close() {
      closed = true;
      clearTimeout(timer);
      await running;
    },
  };
}
