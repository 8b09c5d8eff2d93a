/**
 * Whether an error says the database cannot be reached (it is down,
 * restarting, or the network to it is gone), rather than that a statement was
 * wrong. The one place that knows what such errors look like: the health
 * tracker counts them, the API answers them with 503 unavailable, and
 * background loops stay quiet about them (the tracker logs the outage once).
 */
export function isDatabaseUnreachable(err: unknown): boolean {
  if (err instanceof DatabasePoolBusyError) return false;
  for (let e: unknown = err, depth = 0; e instanceof Error && depth < 4; e = e.cause, depth++) {
    if (unreachableHere(e)) return true;
    if (
      e instanceof AggregateError &&
      e.errors.some((inner) => inner instanceof Error && unreachableHere(inner))
    )
      return true;
  }
  return false;
}

/** Node's socket errors for a server that is gone or cannot be reached. */
const socketCodes = new Set([
  "ECONNREFUSED",
  "ECONNRESET",
  "ECONNABORTED",
  "EPIPE",
  "ETIMEDOUT",
  "EHOSTUNREACH",
  "ENETUNREACH",
  "EHOSTDOWN",
  "ENETDOWN",
  "EAI_AGAIN",
]);

/**
 * SQLSTATEs of a server going away: 57P01 admin_shutdown, 57P02 crash_shutdown, 57P03
 * cannot_connect_now; class 08 is "connection exception".
 */
const sqlStates = new Set(["57P01", "57P02", "57P03"]);

/**
 * What node-postgres says, without a code, when the socket closed under it or a dead client is
 * used.
 */
/**
 * node-postgres's words when no connection came within connectionTimeoutMillis: the server is gone,
 * or every pooled one stayed busy (watched-pool.ts tells them apart).
 */
const connectTimeout = /^timeout exceeded when trying to connect/;
const messages = [
  /^Connection terminated/,
  connectTimeout,
  /^Client has encountered a connection error and is not queryable/,
];

/** Whether `err` is node-postgres's connection timeout (see connectTimeout). */
export function isConnectTimeout(err: unknown): boolean {
  return err instanceof Error && connectTimeout.test(err.message);
}

function unreachableHere(e: Error): boolean {
  const code = (e as { code?: unknown }).code;
  if (
    typeof code === "string" &&
    (socketCodes.has(code) || sqlStates.has(code) || /^08[0-9A-Z]{3}$/.test(code))
  )
    return true;
  return messages.some((m) => m.test(e.message));
}

/**
 * Logs "`what`: message", unless the database is unreachable: the health
 * tracker has said so once already, and a loop retrying every second would
 * otherwise repeat it every second.
 */
export function logUnlessUnreachable(what: string, err: unknown): void {
  if (isDatabaseUnreachable(err)) return;
  console.error(`${what}: ${err instanceof Error ? err.message : String(err)}`);
}

/**
 * Every pooled connection stayed checked out for the pool's whole connection timeout: the
 * database answers, but this process asks more of it at once than its pool holds (an overload, or
 * long transactions). node-postgres says "timeout exceeded when trying to connect" for this and for
 * a server it cannot reach alike; the pool's count tells them apart (watched-pool.ts). Not an
 * outage: the health tracker ignores it; the API answers 503 with what is busy.
 */
export class DatabasePoolBusyError extends Error {
  constructor(
    readonly poolSize: number,
    readonly waitedMs: number,
  ) {
    super(
      `all ${poolSize} database connections of this replica stayed busy for ${waitedMs / 1000} s`,
    );
    this.name = "DatabasePoolBusyError";
  }
}
