import { createHash, randomBytes, timingSafeEqual } from "node:crypto";

/**
 * Who a session acts for. In the local one-time-token mode that is the operator whose certificate
 * the dashboard holds; a single sign-on sign-in makes a person of the provider's identity the same
 * way (createSession).
 */
export interface Person {
  /** The identity the control plane knows, e.g. spiffe://forelead/services/ops. */
  readonly id: string;
  /** How the browser proved it: `sign-in token` or `sso`. */
  readonly via: string;
  /** The provider's identity claim the ID was made from (single sign-on), shown beside it. */
  readonly claim?: string;
}

/** What a single sign-on session holds besides its person (never sent to the browser). */
interface Delegation {
  /** The control plane's session credential, sent as forelead-on-behalf-of on every call. */
  readonly onBehalfOf: string;
  /** When the control plane's session ends (ms since the epoch): the dashboard's ends then too. */
  readonly endsAt: number;
}

/** A live session as the dashboard keeps it (never the cookie's id itself). */
export interface Session {
  readonly person: Person;
  /** The control plane's session this one acts through (single sign-on only). */
  readonly delegation?: Delegation;
  /** Sent by the page in the x-forelead-csrf header on every state-changing call. */
  readonly csrfToken: string;
  readonly createdAt: number;
  lastSeenAt: number;
}

/** A new session: the cookie's value (given to the browser once) and the session. */
interface NewSession {
  readonly cookieValue: string;
  readonly session: Session;
}

/** The dashboard's sessions, in its own memory (a restart signs everybody out). */
export interface SessionStore {
  /**
   * Starts a session for `person` (acting through `delegation` when signed in by single sign-on):
   * a random id (32 bytes, base64url) kept only as its SHA-256.
   */
  createSession(person: Person, delegation?: Delegation): NewSession;
  /**
   * The live session of a cookie's value, its idle clock restarted; undefined when unknown, ended,
   * or past its idle or absolute lifetime (such a session is dropped).
   */
  lookup(cookieValue: string): Session | undefined;
  /** When `session` ends unless used again (ms since the epoch). */
  expiresAt(session: Session): number;
  /** Ends the session of a cookie's value (sign-out); a replay of that cookie finds nothing. */
  end(cookieValue: string): void;
  /**
   * Calls `listener` with each session dropped because its lifetime ran out (not at sign-out),
   * replacing any listener before: single sign-on ends the control plane's session then too.
   */
  onExpired(listener: (session: Session) => void): void;
}

/** Lifetimes of a session, in ms. */
export interface SessionLifetimes {
  /** Ends a session not used for this long (--session-idle). */
  readonly idleMs: number;
  /** Ends a session this long after sign-in, used or not (--session-max). */
  readonly maxMs: number;
}

/** --session-idle and --session-max when not given: 30 minutes and 12 hours. */
export const defaultSessionLifetimes: SessionLifetimes = {
  idleMs: 30 * 60_000,
  maxMs: 12 * 3_600_000,
};

/** A random secret of 32 bytes, base64url. */
export function randomSecret(): string {
  return randomBytes(32).toString("base64url");
}

/** SHA-256 of `text`, as the key a secret is kept under. */
function secretHash(text: string): Buffer {
  return createHash("sha256").update(text, "utf8").digest();
}

/** Compares a presented secret with the expected one in constant time (over their hashes). */
export function secretMatches(presented: string, expected: string): boolean {
  return timingSafeEqual(secretHash(presented), secretHash(expected));
}

/** A session store in this process's memory, with these lifetimes (`now`: the clock). */
export function createSessionStore(
  lifetimes: SessionLifetimes = defaultSessionLifetimes,
  now: () => number = Date.now,
): SessionStore {
  const sessions = new Map<string, Session>();
  const keyOf = (cookieValue: string) => secretHash(cookieValue).toString("hex");
  const expiresAt = (s: Session) =>
    Math.min(
      s.lastSeenAt + lifetimes.idleMs,
      s.createdAt + lifetimes.maxMs,
      s.delegation?.endsAt ?? Infinity,
    );
  // Ended sessions are dropped when next looked up and, so that abandoned ones do not pile up,
  // by a sweep at every sign-in.
  let expired: (session: Session) => void = () => undefined;
  const drop = (key: string, s: Session) => {
    sessions.delete(key);
    expired(s);
  };
  const sweep = (t: number) => {
    for (const [key, s] of sessions) if (expiresAt(s) <= t) drop(key, s);
  };
  return {
    createSession(person, delegation) {
      const t = now();
      sweep(t);
      const cookieValue = randomSecret();
      const session: Session = {
        person,
        delegation,
        csrfToken: randomSecret(),
        createdAt: t,
        lastSeenAt: t,
      };
      sessions.set(keyOf(cookieValue), session);
      return { cookieValue, session };
    },
    lookup(cookieValue) {
      const key = keyOf(cookieValue);
      const session = sessions.get(key);
      if (!session) return undefined;
      const t = now();
      if (expiresAt(session) <= t) {
        drop(key, session);
        return undefined;
      }
      session.lastSeenAt = t;
      return session;
    },
    expiresAt,
    end(cookieValue) {
      sessions.delete(keyOf(cookieValue));
    },
    onExpired(listener) {
      expired = listener;
    },
  };
}
