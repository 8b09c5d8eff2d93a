/** Something a start opened and its owner must close. */
interface Closable {
  close(): unknown;
}

/**
 * The resources a control plane opened, closed in reverse order of opening:
 * a resource is closed before anything it was built on. Shaped like the
 * standard AsyncDisposableStack (not in Node 20): `close()` and a failed
 * start both call `unwind()`, so there is one teardown, in one order.
 */
export interface ResourceStack {
  /** Runs `close` at unwind, before everything deferred earlier. */
  defer(name: string, close: () => unknown): void;
  /**
   * Defers `resource.close()` and returns the resource, so opening and registering are one line.
   */
  use<T extends Closable>(name: string, resource: T): T;
  /**
   * Closes every resource, newest first, once (later calls get the same
   * promise). A close that fails does not stop the others; the failures are
   * reported together, each under its resource's name.
   */
  unwind(): Promise<void>;
}

/** What closing failed: every resource whose close threw, newest first. */
export class UnwindError extends AggregateError {
  constructor(
    readonly failures: ReadonlyArray<{ readonly name: string; readonly error: unknown }>,
  ) {
    super(
      failures.map((f) => f.error),
      failures
        .map(
          (f) =>
            `could not close ${f.name} (${f.error instanceof Error ? f.error.message : String(f.error)})`,
        )
        .join("; "),
    );
    this.name = "UnwindError";
  }
}

/** An empty stack. */
export function createResourceStack(): ResourceStack {
  const entries: Array<{ name: string; close: () => unknown }> = [];
  let unwinding: Promise<void> | undefined;
  const defer = (name: string, close: () => unknown) => {
    if (unwinding) throw new Error(`${name} was opened while the control plane was closing`);
    entries.push({ name, close });
  };
  return {
    defer,
    use(name, resource) {
      defer(name, () => resource.close());
      return resource;
    },
    unwind() {
      unwinding ??= (async () => {
        const failures: Array<{ name: string; error: unknown }> = [];
        for (const { name, close } of [...entries].reverse()) {
          try {
            await close();
          } catch (error) {
            failures.push({ name, error });
          }
        }
        if (failures.length > 0) throw new UnwindError(failures);
      })();
      return unwinding;
    },
  };
}
