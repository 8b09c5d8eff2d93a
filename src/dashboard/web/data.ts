// useData: a page's call to the control plane, run on mount, again when its inputs change, and
// again (coalesced) when a live event of the given types arrives (live.ts) — pages update from the
// event stream, not by polling.
import { useEffect, useRef, useState } from "preact/hooks";
import { subscribe } from "./live.js";

export interface DataState<T> {
  readonly data: T | undefined;
  readonly error: unknown;
  readonly loading: boolean;
  reload(): void;
}

/**
 * Events of one burst (a job settling writes several) cause one reload after this long, by default.
 */
const defaultCoalesceMs = 250;

/**
 * Runs `load` and keeps its result. `deps` re-run it (as useEffect's deps); `liveTypes` re-run it
 * when such an event arrives (undefined: never; [] : on every event), at most once per
 * `coalesceMs`.
 */
export function useData<T>(
  load: (signal: AbortSignal) => Promise<T>,
  deps: readonly unknown[],
  liveTypes?: readonly string[],
  coalesceMs = defaultCoalesceMs,
): DataState<T> {
  const [data, setData] = useState<T | undefined>(undefined);
  const [error, setError] = useState<unknown>(undefined);
  const [loading, setLoading] = useState(true);
  const [tick, setTick] = useState(0);
  const loadRef = useRef(load);
  loadRef.current = load;
  useEffect(() => {
    const ac = new AbortController();
    setLoading(true);
    loadRef.current(ac.signal).then(
      (v) => {
        if (ac.signal.aborted) return;
        setData(v);
        setError(undefined);
        setLoading(false);
      },
      (err: unknown) => {
        if (ac.signal.aborted) return;
        setError(err);
        setLoading(false);
      },
    );
    return () => ac.abort();
  }, [...deps, tick]);
  useEffect(() => {
    if (!liveTypes) return undefined;
    let timer: ReturnType<typeof setTimeout> | undefined;
    const unsubscribe = subscribe(liveTypes, () => {
      if (timer === undefined)
        timer = setTimeout(() => ((timer = undefined), setTick((t) => t + 1)), coalesceMs);
    });
    return () => {
      unsubscribe();
      if (timer !== undefined) clearTimeout(timer);
    };
  }, [liveTypes?.join(","), coalesceMs]);
  return { data, error, loading, reload: () => setTick((t) => t + 1) };
}
