// useFollow: a job's log or events stream followed live (follow.ts), restarted when the job
// changes, stopped when the page leaves. Entries are handed to `onEntry` as they arrive; the
// state (connecting, live, reconnecting, ended, failed) is returned for the page to show.
import { useEffect, useRef, useState } from "preact/hooks";
import { follow, type FollowState } from "./follow.js";

export type Followed = FollowState | { readonly kind: "connecting" };

export function useFollow<E extends { readonly position: string }>(
  open: (after: string, signal: AbortSignal) => AsyncIterable<E>,
  onEntry: (entry: E) => void,
  deps: readonly unknown[],
): Followed {
  const [state, setState] = useState<Followed>({ kind: "connecting" });
  const openRef = useRef(open);
  const entryRef = useRef(onEntry);
  openRef.current = open;
  entryRef.current = onEntry;
  useEffect(() => {
    setState({ kind: "connecting" });
    const f = follow<E>({
      open: (after, signal) => openRef.current(after, signal),
      cursor: (e) => e.position,
      onEntry: (e) => entryRef.current(e),
      onState: (s) => {
        if (s.kind !== "stopped") setState(s);
      },
    });
    return () => f.stop();
  }, deps);
  return state;
}
