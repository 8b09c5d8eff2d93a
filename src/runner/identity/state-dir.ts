// The runner's state directory (0700; files 0600) holds its key and
// certificate, replaced as a pair so a crash mid-renewal never leaves a key
// that does not match its certificate.
import { mkdir, readFile, rename, rm } from "node:fs/promises";
import { join } from "node:path";
import { writeFileAtomic } from "../../identity/pki-files.js";
import { keyMatches, runnerIdentityOf, type RunnerIdentity } from "./runner-identity.js";

/** File names inside the state directory. */
const stateFiles = { cert: "cert.pem", key: "key.pem" } as const;

/** Reads the identity in `stateDir`, finishing a pair replacement a crash interrupted. */
export async function loadIdentity(stateDir: string): Promise<RunnerIdentity> {
  const path = (name: string) => join(stateDir, name);
  const read = (name: string) => readFile(path(name), "utf8").catch(() => undefined);
  const [cert, key, nextCert, nextKey] = await Promise.all([
    read(stateFiles.cert),
    read(stateFiles.key),
    read(`${stateFiles.cert}.next`),
    read(`${stateFiles.key}.next`),
  ]);
  // saveIdentity renames the key first, then the certificate: a crash in between leaves
  // cert.pem.next.
  if (
    nextCert !== undefined &&
    nextKey === undefined &&
    key !== undefined &&
    keyMatches(nextCert, key)
  ) {
    await rename(path(`${stateFiles.cert}.next`), path(stateFiles.cert));
    return runnerIdentityOf(nextCert, key);
  }
  await rm(path(`${stateFiles.cert}.next`), { force: true });
  await rm(path(`${stateFiles.key}.next`), { force: true });
  if (cert === undefined || key === undefined) {
    throw new Error(
      `${stateDir} holds no runner identity (${stateFiles.cert} and ` +
        `${stateFiles.key}); run \`forelead runner enroll --state-dir ` +
        `${stateDir} ...\` first`,
    );
  }
  if (!keyMatches(cert, key))
    throw new Error(
      `${join(stateDir, stateFiles.key)} does not belong to ${join(stateDir, stateFiles.cert)}; enroll again`,
    );
  return runnerIdentityOf(cert, key);
}

/**
 * Writes key and certificate: both to ".next" files first, then renamed key first (see
 * loadIdentity).
 */
export async function saveIdentity(stateDir: string, identity: RunnerIdentity): Promise<void> {
  await mkdir(stateDir, { recursive: true, mode: 0o700 });
  const path = (name: string) => join(stateDir, name);
  await writeFileAtomic(path(`${stateFiles.key}.next`), identity.keyPem, 0o600);
  await writeFileAtomic(path(`${stateFiles.cert}.next`), identity.certPem, 0o600);
  await rename(path(`${stateFiles.key}.next`), path(stateFiles.key));
  await rename(path(`${stateFiles.cert}.next`), path(stateFiles.cert));
}
