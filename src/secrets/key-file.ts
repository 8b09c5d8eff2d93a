import { randomBytes } from "node:crypto";
import { mkdir, open, readFile, stat } from "node:fs/promises";
import { homedir } from "node:os";
import { dirname, join } from "node:path";
import { secretsKey, secretsKeyBytes, type SecretsKey } from "./box.js";

/**
 * Reads a key file: one line, 32 random bytes in base64. A file that group
 * or others can read is refused, naming the chmod that fixes it: the key
 * opens every secret in the database.
 */
export async function readSecretsKeyFile(path: string): Promise<SecretsKey> {
  let mode: number;
  try {
    mode = (await stat(path)).mode & 0o777;
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === "ENOENT")
      throw new Error(
        `the secrets key file ${path} does not exist; make one with: (umask 077; openssl rand -base64 32 > ${path})`,
      );
    throw err;
  }
  if (mode & 0o077)
    throw new Error(
      `the secrets key file ${path} is readable by others (mode ` +
        `${mode.toString(8).padStart(4, "0")}); run: chmod 600 ${path}`,
    );
  const text = (await readFile(path, "utf8")).trim();
  if (!/^[A-Za-z0-9+/]+={0,2}$/.test(text))
    throw new Error(
      `the secrets key file ${path} is not one line of base64; it must hold ` +
        `${secretsKeyBytes} random bytes (openssl rand -base64 32)`,
    );
  return secretsKey(Buffer.from(text, "base64"), path);
}

/**
 * The embedded database's key: read from `path`, or, on the first start,
 * made there (mode 0600, created exclusively so two starts cannot write two
 * keys). `created` says which, so the caller can say so.
 */
export async function readOrCreateSecretsKeyFile(
  path: string,
): Promise<{ key: SecretsKey; created: boolean }> {
  await mkdir(dirname(path), { recursive: true, mode: 0o700 });
  await refuseWritableDirectory(dirname(path));
  let file;
  try {
    file = await open(path, "wx", 0o600);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === "EEXIST")
      return { key: await readSecretsKeyFile(path), created: false };
    throw err;
  }
  try {
    await file.writeFile(`${randomBytes(secretsKeyBytes).toString("base64")}\n`);
    await file.sync();
  } finally {
    await file.close();
  }
  return { key: await readSecretsKeyFile(path), created: true };
}

/**
 * Where a secrets key is made when no flag names one: outside the data directory, so a backup of
 * the data never carries the key that opens it. `$XDG_CONFIG_HOME/forelead/secrets.key` when that
 * is set; otherwise `/etc/forelead/secrets.key` for root and `~/.config/forelead/secrets.key` for
 * anyone else.
 */
export function defaultSecretsKeyPath(
  env: NodeJS.ProcessEnv = process.env,
  uid: number | undefined = process.getuid?.(),
  home: string = homedir(),
): string {
  if (env.XDG_CONFIG_HOME) return join(env.XDG_CONFIG_HOME, "forelead", "secrets.key");
  if (uid === 0) return "/etc/forelead/secrets.key";
  return join(home, ".config", "forelead", "secrets.key");
}

/** What openEmbeddedSecretsKey found or made, for the start-up log. */
export interface EmbeddedSecretsKey {
  readonly key: SecretsKey;
  readonly path: string;
  readonly created: boolean;
  /** Set when the key was read from the old place inside the data directory: where it belongs. */
  readonly moveTo?: string;
}

/**
 * An embedded database's key: at `path` (the flag's or the default place), made there on the
 * first start; or, while nothing is at `path`, the key an earlier version made at `oldPath` inside
 * the data directory, which keeps working (an upgrade never stops a control plane) and is
 * reported with where it belongs.
 */
export async function openEmbeddedSecretsKey(
  path: string,
  oldPath: string,
): Promise<EmbeddedSecretsKey> {
  if (!(await exists(path)) && (await exists(oldPath)))
    return { key: await readSecretsKeyFile(oldPath), path: oldPath, created: false, moveTo: path };
  return { ...(await readOrCreateSecretsKeyFile(path)), path };
}

async function exists(path: string): Promise<boolean> {
  try {
    await stat(path);
    return true;
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === "ENOENT") return false;
    throw err;
  }
}

/** Anyone who can write the key's directory can replace the key: such a directory is refused. */
async function refuseWritableDirectory(dir: string): Promise<void> {
  const mode = (await stat(dir)).mode & 0o777;
  if (mode & 0o022)
    throw new Error(
      `the secrets key's directory ${dir} is writable by others (mode ` +
        `${mode.toString(8).padStart(4, "0")}), who could replace the key; run: chmod go-w ${dir}`,
    );
}
