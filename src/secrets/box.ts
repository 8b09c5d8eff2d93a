import { createCipheriv, createDecipheriv, createHmac, hkdfSync, randomBytes } from "node:crypto";

/**
 * A secrets key: 32 bytes for AES-256-GCM, where it came from (named in
 * every refusal) and its id, one byte derived from the key itself, written
 * into every value it seals so rotation can tell which key sealed a row.
 */
export interface SecretsKey {
  readonly id: number;
  readonly key: Buffer;
  /** The key file, or a description of a key made for this run only. */
  readonly source: string;
}

/** Bytes of a key. */
export const secretsKeyBytes = 32;

/** Format byte of a sealed value: version 1 is [1, key id, nonce(12), tag(16), ciphertext]. */
const format = 1;
const nonceBytes = 12;
const tagBytes = 16;
const headerBytes = 2 + nonceBytes + tagBytes;

/** The key of `bytes` (32), with its derived id. */
export function secretsKey(bytes: Buffer, source: string): SecretsKey {
  if (bytes.length !== secretsKeyBytes)
    throw new Error(
      `the secrets key in ${source} is ${bytes.length} bytes; it must be ` +
        `${secretsKeyBytes} random bytes, base64 (make one with: openssl rand ` +
        `-base64 32 > ${source})`,
    );
  return {
    id: createHmac("sha256", bytes).update("forelead secrets key id").digest()[0]!,
    key: bytes,
    source,
  };
}

/** A fresh random key, not written anywhere (an in-memory database). */
export function ephemeralSecretsKey(): SecretsKey {
  return secretsKey(
    randomBytes(secretsKeyBytes),
    "a key made for this run (the database is in memory)",
  );
}

/** The key id byte of a sealed value. */
export function sealedKeyId(sealed: Uint8Array): number {
  return sealed[1] ?? -1;
}

/**
 * Seals and opens values with the current key; opens with the previous one
 * too while a rotation runs. The associated data binds a sealed value to its
 * row (a job id and secret name, a repository name), so a value copied into
 * another row does not open. Errors never include a value.
 */
export interface SecretBox {
  readonly current: SecretsKey;
  readonly previous: SecretsKey | undefined;
  seal(value: string, boundTo: string): Buffer;
  /** Throws when no key given opens it (a wrong key, or a value moved between rows). */
  open(sealed: Uint8Array, boundTo: string): string;
  /**
   * A keyed hash of a value (HMAC-SHA-256 under a key derived from the
   * current secrets key): compares values without storing anything a
   * low-entropy secret could be guessed back from.
   */
  keyedHash(value: string): string;
}

/** The box of `current` (and `previous`, for reading while rows are re-encrypted). */
export function createSecretBox(current: SecretsKey, previous?: SecretsKey): SecretBox {
  if (previous && previous.id === current.id && !previous.key.equals(current.key)) {
    throw new Error(
      `the secrets keys in ${current.source} and ${previous.source} have the ` +
        `same key id (${current.id}); make a new key for --secrets-key (openssl ` +
        `rand -base64 32)`,
    );
  }
  const hashKey = Buffer.from(
    hkdfSync("sha256", current.key, Buffer.alloc(0), "forelead secrets keyed hash", 32),
  );
  const keys = previous && previous.id !== current.id ? [current, previous] : [current];
  return {
    current,
    previous: keys[1],
    seal(value, boundTo) {
      const nonce = randomBytes(nonceBytes);
      const cipher = createCipheriv("aes-256-gcm", current.key, nonce);
      cipher.setAAD(Buffer.from(boundTo, "utf8"));
      const body = Buffer.concat([cipher.update(value, "utf8"), cipher.final()]);
      return Buffer.concat([Buffer.from([format, current.id]), nonce, cipher.getAuthTag(), body]);
    },
    open(sealed, boundTo) {
      const bytes = Buffer.from(sealed);
      const key = keys.find((k) => k.id === sealedKeyId(bytes));
      if (bytes.length < headerBytes || bytes[0] !== format)
        throw new Error(
          `a sealed value for ${boundTo} is not in a format this control plane reads`,
        );
      if (!key)
        throw new Error(
          `a sealed value for ${boundTo} was sealed with key id ` +
            `${sealedKeyId(bytes)}, which is neither ` +
            `${keys.map((k) => `${k.source} (id ${k.id})`).join(" nor ")}`,
        );
      try {
        const decipher = createDecipheriv(
          "aes-256-gcm",
          key.key,
          bytes.subarray(2, 2 + nonceBytes),
        );
        decipher.setAAD(Buffer.from(boundTo, "utf8"));
        decipher.setAuthTag(bytes.subarray(2 + nonceBytes, headerBytes));
        return Buffer.concat([
          decipher.update(bytes.subarray(headerBytes)),
          decipher.final(),
        ]).toString("utf8");
      } catch {
        throw new Error(
          `a sealed value for ${boundTo} does not open with ${key.source}: a ` +
            `different key with the same id, or the value was altered or moved from ` +
            `another row`,
        );
      }
    },
    keyedHash: (value) => createHmac("sha256", hashKey).update(value, "utf8").digest("hex"),
  };
}
