/**
 * The bounds one listener puts on its clients' connections (docs/limits.md).
 * Every one is a `forelead serve` flag; none of them cuts a long-poll claim
 * (its body is complete and its stream open) or a log follow (likewise).
 */
export interface ConnectionLimits {
  /** A TLS handshake not finished within this is closed (`--tls-handshake-timeout`). */
  readonly handshakeTimeoutMs: number;
  /** SETTINGS_MAX_CONCURRENT_STREAMS of every connection (`--max-concurrent-streams`). */
  readonly maxConcurrentStreams: number;
  /**
   * A request body that brings less than 1 KiB and no complete NDJSON line in this long (and has
   * not ended) is ended: 408 on
   * REST, deadline_exceeded on Connect (`--body-idle-timeout`).
   */
  readonly bodyIdleMs: number;
  /**
   * Streams a connection without a client certificate may have open at once
   * (`--max-streams-without-certificate`).
   */
  readonly certlessMaxStreams: number;
  /**
   * Connections one client address may hold, handshakes included (`--max-connections-per-address`).
   */
  readonly maxConnectionsPerAddress: number;
  /**
   * A connection with no open stream for this long is closed with GOAWAY
   * (`--idle-connection-timeout`).
   */
  readonly idleConnectionMs: number;
}

/**
 * The defaults: a handshake 10 s, 128 streams, 15 s without body progress, 4 streams without a
 * certificate, 256 connections per address, 5 min idle.
 */
export const defaultConnectionLimits: ConnectionLimits = {
  handshakeTimeoutMs: 10_000,
  maxConcurrentStreams: 128,
  bodyIdleMs: 15_000,
  certlessMaxStreams: 4,
  maxConnectionsPerAddress: 256,
  idleConnectionMs: 5 * 60_000,
};

/**
 * What the listener counted since it started; read by operators (and tests) through the control
 * plane.
 */
export interface ConnectionCounters {
  /**
   * Streams the client closed or reset before their reply was complete (a client going away, not an
   * error).
   */
  readonly prematureCloses: number;
  /** Request bodies ended for making no progress within the bound. */
  readonly stalledBodies: number;
  /** TLS handshakes closed for not finishing within the bound. */
  readonly handshakeTimeouts: number;
  /** Connections refused at accept for the per-address cap. */
  readonly refusedConnections: number;
  /** Connections closed for having no open stream within the bound. */
  readonly idleConnectionsClosed: number;
}
