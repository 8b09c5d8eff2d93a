/** How a batcher groups calls. */
export interface BatcherOptions {
  /** Most calls one batch serves. */
  readonly maxBatch: number;
  /** Most batches running at once; calls arriving meanwhile wait and join the next. */
  readonly maxInFlight: number;
}

/**
 * Serves calls in batches. A call that finds a free batch runs at once
 * (after the current I/O turn, so requests read from the network together
 * go together); calls that arrive while `maxInFlight` batches are running
 * wait and are served together by the next one. Under load, one statement
 * and one commit then serve many requests; alone, a call costs what it did.
 * `run` answers each item in order: its value or its own error.
 */
export function createBatcher<I, O>(
  run: (items: readonly I[]) => Promise<ReadonlyArray<PromiseSettledResult<O>>>,
  options: BatcherOptions,
): (item: I) => Promise<O> {
  const waiting: Array<{
    readonly item: I;
    resolve(value: O): void;
    reject(reason: unknown): void;
  }> = [];
  let inFlight = 0;
  let scheduled = false;
  const pump = () => {
    scheduled = false;
    while (inFlight < options.maxInFlight && waiting.length > 0) {
      const batch = waiting.splice(0, options.maxBatch);
      inFlight++;
      run(batch.map((b) => b.item))
        .then(
          (results) =>
            batch.forEach((b, i) => {
              const r = results[i];
              if (r?.status === "fulfilled") b.resolve(r.value);
              else b.reject(r ? r.reason : new Error("the batch gave no answer for this call"));
            }),
          (err) => batch.forEach((b) => b.reject(err)),
        )
        .finally(() => {
          inFlight--;
          schedule();
        });
    }
  };
  const schedule = () => {
    if (scheduled || waiting.length === 0) return;
    scheduled = true;
    setImmediate(pump);
  };
  return (item) =>
    new Promise<O>((resolve, reject) => {
      waiting.push({ item, resolve, reject });
      schedule();
    });
}

/** Settles every promise of `fn` over `items`, in order. */
export function settleEach<I, O>(
  items: readonly I[],
  fn: (item: I) => Promise<O>,
): Promise<Array<PromiseSettledResult<O>>> {
  return Promise.allSettled(items.map(fn));
}
