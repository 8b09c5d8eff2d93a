import { randomUUID } from "node:crypto";
import { open, readFile, stat } from "node:fs/promises";
import { exportJWK, generateKeyPair, importJWK, type CryptoKey, type JWK } from "jose";
import { writeFileAtomic } from "../pki-files.js";

/** The signing algorithm of every job-token key: ECDSA P-256 with SHA-256. */
export const jobTokenAlg = "ES256";

/**
 * Retired keys stay published this long after their retirement: the longest token lifetime
 * (jobTokenLimits.maxLifetimeSeconds) and a minute for a replica to read the rotated file.
 */
const retiredKeepSeconds = 15 * 60 + 60;

/** One private key of the file: a JWK with its kid, and when it stopped signing. */
interface StoredKey extends JWK {
  readonly kid: string;
  /** RFC 3339; absent on the signing key. */
  readonly retiredAt?: string;
}

/** The job-token key file: keys[0] signs; the others are retired and published for a while. */
interface KeyFile {
  readonly keys: readonly StoredKey[];
}

/** The keys read from the file: the one that signs, and the public keys a verifier may need. */
export interface JobTokenKeys {
  readonly signing: { readonly kid: string; readonly key: CryptoKey };
  /** The JWKS to publish at `now`: the signing key and retired keys still inside their window. */
  publicKeys(now: Date): { readonly keys: readonly JWK[] };
}

/**
 * Reads the key file (a JSON key set of private keys, mode 0600; `forelead job-token init` makes
 * one and `rotate` adds a key). A file group or others can read is refused with the chmod that
 * fixes it: the key signs every job's identity.
 */
export async function readJobTokenKeys(path: string): Promise<JobTokenKeys> {
  const file = await readKeyFile(path);
  const current = file.keys[0]!;
  const key = (await importJWK(privateOnly(current), jobTokenAlg)) as CryptoKey;
  const published = file.keys.map((k) => ({ retiredAt: k.retiredAt, jwk: publicOf(k) }));
  return {
    signing: { kid: current.kid, key },
    publicKeys(now) {
      return {
        keys: published
          .filter(
            (k) =>
              !k.retiredAt || Date.parse(k.retiredAt) + retiredKeepSeconds * 1000 > now.getTime(),
          )
          .map((k) => k.jwk),
      };
    },
  };
}

/**
 * Makes a key file with one new key at `path` (0600, created exclusively so two replicas starting
 * together cannot write two keys); false when one is already there.
 */
export async function createJobTokenKeyFile(path: string): Promise<boolean> {
  let handle;
  try {
    handle = await open(path, "wx", 0o600);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === "EEXIST") return false;
    throw err;
  }
  try {
    await handle.writeFile(JSON.stringify({ keys: [await newKey()] }, null, 2) + "\n");
    await handle.sync();
  } finally {
    await handle.close();
  }
  return true;
}

/**
 * Rotates the key file: a new key signs from now; the previous signing key is retired at `now`
 * and stays published until every token it signed has expired; keys retired longer ago are
 * dropped. Returns the new key's kid. Replicas pick the file up within a second (watchJobTokenKeys).
 */
export async function rotateJobTokenKeyFile(path: string, now = new Date()): Promise<string> {
  const file = await readKeyFile(path);
  const next = await newKey();
  const keep = file.keys
    .map((k, i) => (i === 0 ? { ...k, retiredAt: now.toISOString() } : k))
    .filter((k) => Date.parse(k.retiredAt!) + retiredKeepSeconds * 1000 > now.getTime());
  await writeFileAtomic(path, JSON.stringify({ keys: [next, ...keep] }, null, 2) + "\n", 0o600);
  return next.kid;
}

/**
 * The key set of `path`, re-read when the file changes (looked at most once a second), so a
 * rotation reaches a running control plane without a restart.
 */
export async function watchJobTokenKeys(path: string): Promise<() => Promise<JobTokenKeys>> {
  let keys = await readJobTokenKeys(path);
  let mtimeMs = (await stat(path)).mtimeMs;
  let checkedAt = Date.now();
  return async () => {
    if (Date.now() - checkedAt < 1000) return keys;
    checkedAt = Date.now();
    const now = (await stat(path)).mtimeMs;
    if (now !== mtimeMs) {
      keys = await readJobTokenKeys(path);
      mtimeMs = now;
    }
    return keys;
  };
}

async function newKey(): Promise<StoredKey> {
  const { privateKey } = await generateKeyPair(jobTokenAlg, { extractable: true });
  return { ...(await exportJWK(privateKey)), kid: randomUUID(), alg: jobTokenAlg, use: "sig" };
}

async function readKeyFile(path: string): Promise<KeyFile> {
  let mode: number;
  try {
    mode = (await stat(path)).mode & 0o777;
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === "ENOENT")
      throw new Error(
        `the job-token key file ${path} does not exist; make one with: ` +
          `forelead job-token init --key ${path}`,
      );
    throw err;
  }
  if (mode & 0o077)
    throw new Error(
      `the job-token key file ${path} is readable by others (mode ` +
        `${mode.toString(8).padStart(4, "0")}); run: chmod 600 ${path}`,
    );
  let file: KeyFile;
  try {
    file = JSON.parse(await readFile(path, "utf8")) as KeyFile;
  } catch (err) {
    throw new Error(`the job-token key file ${path} is not JSON: ${(err as Error).message}`);
  }
  const keys = Array.isArray(file?.keys) ? file.keys : [];
  if (
    keys.length === 0 ||
    !keys.every((k) => k.kty === "EC" && k.crv === "P-256" && k.d && typeof k.kid === "string") ||
    !keys.slice(1).every((k) => typeof k.retiredAt === "string")
  )
    throw new Error(
      `the job-token key file ${path} is not a job-token key set (JSON {"keys": [...]}, P-256 ` +
        `private keys with a kid, every one but the first retired); make one with ` +
        `forelead job-token init`,
    );
  return { keys };
}

function privateOnly({ retiredAt: _r, ...jwk }: StoredKey): JWK {
  return jwk;
}

/** The public half of a key as published: kty, crv, x, y, kid, alg, use. */
function publicOf(k: StoredKey): JWK {
  return { kty: k.kty, crv: k.crv, x: k.x, y: k.y, kid: k.kid, alg: jobTokenAlg, use: "sig" };
}
