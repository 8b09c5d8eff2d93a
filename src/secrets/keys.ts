import { ephemeralSecretsKey, type SecretsKey } from "./box.js";

/**
 * The keys a control plane starts with: the current one, and the one it replaces while rows are
 * re-encrypted.
 */
export interface SecretsKeys {
  readonly current: SecretsKey;
  readonly previous?: SecretsKey;
}

/**
 * The keys for a start without --secrets-key: refused on a shared database
 * (replicas and restarts need the same key, which only a key file given to
 * each gives); on an embedded database in memory, a key for this run, since
 * nothing outlives it. (`forelead serve` makes a key file beside an embedded
 * data directory.)
 */
export function defaultSecretsKeys(database: {
  readonly shared: boolean;
  readonly persistent: boolean;
}): SecretsKeys {
  if (database.shared)
    throw new Error(
      "a postgres:// database needs --secrets-key FILE: the key that encrypts " +
        "job secrets and repository credentials (make one with: (umask 077; " +
        "openssl rand -base64 32 > secrets.key)); every replica is given the " +
        "same file",
    );
  if (database.persistent)
    throw new Error(
      "an embedded data directory needs --secrets-key FILE (forelead serve makes one beside it on the first start)",
    );
  return { current: ephemeralSecretsKey() };
}
