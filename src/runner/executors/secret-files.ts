import { createHash } from "node:crypto";
import { constants as fsConstants } from "node:fs";
import { access, chown, mkdtemp, readdir, rm, stat, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { secretFileNameProblem } from "../../protocol/secret-names.js";
import type { JobSecrets } from "./executor.js";

/**
 * The env variable that names the directory of a job's secret files (set only when the job has
 * some).
 */
export const secretsDirEnv = "FORELEAD_SECRETS_DIR";

/** Where a container sees its secret files (the docker executor mounts them there, read-only). */
export const containerSecretsDir = "/run/secrets";

/** A job's secret files, written out; remove() deletes them and their directory. */
export interface WrittenSecretFiles {
  readonly dir: string;
  remove(): Promise<void>;
}

/**
 * Where secret files go: tmpfs (/dev/shm) when this machine has a writable one, so they never reach
 * a disk; else the temp directory.
 */
async function secretsRoot(): Promise<string> {
  try {
    if ((await stat("/dev/shm")).isDirectory()) {
      await access("/dev/shm", fsConstants.W_OK);
      return "/dev/shm";
    }
  } catch {
    // no tmpfs here
  }
  return tmpdir();
}

/**
 * The name prefix of the secret directories of jobs run under `jobsDir`:
 * one runner's, since a runner's state directory is locked to one process,
 * so a runner restarted after a crash can remove what its earlier life left.
 */
function secretsPrefix(jobsDir: string): string {
  return `forelead-secrets-${createHash("sha256").update(resolve(jobsDir)).digest("hex").slice(0, 12)}-`;
}

/**
 * Writes `files` into a fresh private directory (mode 0700, each file 0400,
 * given to `uid` when the job runs as a user of its own) for the job whose
 * directory is `jobDir`, and returns it, or undefined when there are none.
 * The caller removes it when the job has ended, whatever the end; after a
 * crash, removeLeftoverSecretFiles does. Names are checked again here (one
 * path segment: secretFileNameProblem): a file must never land outside it.
 */
export async function writeSecretFiles(
  files: Readonly<Record<string, string>>,
  jobDir: string,
  uid?: number,
): Promise<WrittenSecretFiles | undefined> {
  const entries = Object.entries(files);
  if (entries.length === 0) return undefined;
  for (const [name] of entries) {
    const problem = secretFileNameProblem(name);
    if (problem) throw new Error(`secret file name ${JSON.stringify(name)} ${problem}`);
  }
  const dir = await privateJobDir(jobDir);
  const remove = () => rm(dir, { recursive: true, force: true });
  try {
    for (const [name, content] of entries) {
      const path = join(dir, name);
      await writeFile(path, content, { mode: 0o400, flag: "wx" });
      if (uid !== undefined) await chown(path, uid, uid);
    }
    if (uid !== undefined) await chown(dir, uid, uid);
  } catch (err) {
    await remove();
    throw err;
  }
  return { dir, remove };
}

/**
 * A fresh private directory (mode 0700) for the job whose directory is `jobDir`, on tmpfs when
 * there is one: for its secret files and its ID-token files. The caller removes it when the job
 * has ended; after a crash, removeLeftoverSecretFiles does.
 */
export async function privateJobDir(jobDir: string): Promise<string> {
  // mkdtemp makes it 0700
  return mkdtemp(join(await secretsRoot(), secretsPrefix(dirname(jobDir))));
}

/**
 * Removes the secret directories that jobs under `jobsDir` left (the runner died before removing
 * them); returns them.
 */
export async function removeLeftoverSecretFiles(jobsDir: string): Promise<string[]> {
  const root = await secretsRoot();
  const prefix = secretsPrefix(jobsDir);
  const left = (await readdir(root).catch(() => [] as string[]))
    .filter((name) => name.startsWith(prefix))
    .map((name) => join(root, name));
  for (const dir of left) await rm(dir, { recursive: true, force: true });
  return left;
}

/**
 * Why the job's secrets cannot be handed to a process, or undefined: an env
 * name must be non-empty without "=" or NUL and a value without NUL (the OS
 * cannot pass them, and Node's refusal would quote the value); a file name
 * must be one path segment. Names the variable or file, never a value.
 */
export function jobSecretsProblem(secrets: JobSecrets): string | undefined {
  for (const [name, value] of Object.entries(secrets.env)) {
    if (name.length === 0 || name.includes("=") || name.includes("\u0000"))
      return `the secret env name ${JSON.stringify(name)} is empty or holds "=" or NUL`;
    if (value.includes("\u0000"))
      return (
        `the value of secret ${name} holds NUL, which an environment variable ` +
        `cannot carry; deliver it as a secret file`
      );
  }
  for (const name of Object.keys(secrets.files)) {
    const problem = secretFileNameProblem(name);
    if (problem) return `the secret file name ${JSON.stringify(name)} ${problem}`;
  }
  return undefined;
}
