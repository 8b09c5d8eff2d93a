import { randomBytes } from "node:crypto";
import { mkdir, open, readFile, stat } from "node:fs/promises";
import { dirname } from "node:path";
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
  await mkdir(dirname(path), { recursive: true });
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
