// The development PKI on disk, shared by `forelead ca init`, `forelead ca issue`
// and `forelead serve` without TLS flags. Keys are written 0600 and every file
// is replaced atomically (temp file + rename), so a crash or a concurrent reader
// never sees a half-written PEM.
import { randomBytes } from "node:crypto";
import { mkdir, open, readFile, rename, rm, stat } from "node:fs/promises";
import { dirname, join } from "node:path";
import {
  createCertificateAuthority,
  issueServerCertificate,
  type CertificateAuthority,
  type IssuedCertificate,
} from "./ca.js";

/** Where the files of a development PKI live inside its directory. */
export interface DevPkiPaths {
  readonly dir: string;
  readonly caCert: string;
  readonly caKey: string;
  readonly serverCert: string;
  readonly serverKey: string;
}

/**
 * The fixed file names of a development PKI in `dir`: ca.pem, ca-key.pem, server.pem,
 * server-key.pem.
 */
export function devPkiPaths(dir: string): DevPkiPaths {
  return {
    dir,
    caCert: join(dir, "ca.pem"),
    caKey: join(dir, "ca-key.pem"),
    serverCert: join(dir, "server.pem"),
    serverKey: join(dir, "server-key.pem"),
  };
}

/**
 * Makes sure `dir` holds a development CA and a server certificate for
 * `hosts`. Existing files are kept unless `force`, so re-running is harmless
 * and runners keep trusting the same CA; `created` says whether anything was
 * written. A missing server pair is issued from the existing CA. Half a pair
 * (a certificate without its key, or the reverse) is refused rather than
 * guessed at, since overwriting it could destroy the only copy of a key.
 */
export async function initDevPki(
  dir: string,
  opts: { hosts: readonly string[]; force?: boolean },
): Promise<{ paths: DevPkiPaths; created: boolean }> {
  const paths = devPkiPaths(dir);
  // 0700 applies only if we create it; an existing directory is the user's to manage.
  await mkdir(dir, { recursive: true, mode: 0o700 });
  const force = opts.force ?? false;
  const caPresent = !force && (await pairPresent(paths.caCert, paths.caKey));
  const serverPresent =
    !force && caPresent && (await pairPresent(paths.serverCert, paths.serverKey));
  if (caPresent && serverPresent) return { paths, created: false };

  let ca: CertificateAuthority;
  if (caPresent) {
    ca = await loadCertificateAuthority(dir);
  } else {
    ca = await createCertificateAuthority();
    await writePair(paths.caCert, paths.caKey, ca);
  }
  const server = await issueServerCertificate(ca, { hosts: opts.hosts });
  await writePair(paths.serverCert, paths.serverKey, server);
  return { paths, created: true };
}

/**
 * Reads the CA certificate and key from a development PKI directory. Fails
 * with an error that names the file and says how to create it.
 */
export async function loadCertificateAuthority(dir: string): Promise<CertificateAuthority> {
  const paths = devPkiPaths(dir);
  const certPem = await readPem(paths.caCert, "CERTIFICATE", dir);
  const keyPem = await readPem(paths.caKey, "PRIVATE KEY", dir);
  return { certPem, keyPem };
}

/**
 * Writes an issued certificate to PREFIX.pem and its key to PREFIX-key.pem
 * (0600), each atomically. When the certificate was issued for a caller's own
 * public key (keyPem is ""), no key file is written and `key` is "".
 */
export async function writeIssued(
  prefix: string,
  issued: IssuedCertificate,
): Promise<{ cert: string; key: string }> {
  const cert = `${prefix}.pem`;
  const key = issued.keyPem === "" ? "" : `${prefix}-key.pem`;
  await mkdir(dirname(cert), { recursive: true, mode: 0o700 });
  // Key first: a certificate on disk without its key is useless and misleading.
  if (key !== "") await writeFileAtomic(key, issued.keyPem, 0o600);
  await writeFileAtomic(cert, issued.certPem, 0o644);
  return { cert, key };
}

// ---------------------------------------------------------------------------

/** Key first, as in writeIssued: a certificate without its key is useless. */
async function writePair(
  certPath: string,
  keyPath: string,
  pair: CertificateAuthority,
): Promise<void> {
  await writeFileAtomic(keyPath, pair.keyPem, 0o600);
  await writeFileAtomic(certPath, pair.certPem, 0o644);
}

/** true if both files exist, false if neither; throws on half a pair. */
async function pairPresent(certPath: string, keyPath: string): Promise<boolean> {
  const [cert, key] = await Promise.all([exists(certPath), exists(keyPath)]);
  if (cert === key) return cert;
  const [found, missing] = cert ? [certPath, keyPath] : [keyPath, certPath];
  throw new Error(
    `found ${found} but not ${missing}; restore it, or remove ${found} (or pass --force) to create a new pair`,
  );
}

async function exists(path: string): Promise<boolean> {
  try {
    await stat(path);
    return true;
  } catch (err) {
    if (errorCode(err) === "ENOENT") return false;
    throw err;
  }
}

/** Reads a PEM file, turning "not there / not readable / not PEM" into advice. */
async function readPem(path: string, label: string, dir: string): Promise<string> {
  const advice = `run \`forelead ca init --dir ${dir}\` to create a development CA`;
  let text: string;
  try {
    text = await readFile(path, "utf8");
  } catch (err) {
    const code = errorCode(err);
    const why = code === "ENOENT" ? "does not exist" : `cannot be read (${code ?? String(err)})`;
    throw new Error(`CA file ${path} ${why}; ${advice}`, { cause: err });
  }
  if (!text.includes(`-----BEGIN ${label}-----`)) {
    throw new Error(`CA file ${path} does not contain a PEM "${label}"; ${advice}`);
  }
  return text;
}

/**
 * Writes `data` to a temp file next to `path` created with `mode` (the umask
 * can only narrow it), flushes it, then renames it over `path`, so readers see
 * the old file or the new one and a key is never briefly world-readable.
 */
export async function writeFileAtomic(path: string, data: string, mode: number): Promise<void> {
  const temp = `${path}.${process.pid}.${randomBytes(6).toString("hex")}.tmp`;
  try {
    // "wx": never follow or clobber something already at the temp name.
    const handle = await open(temp, "wx", mode);
    try {
      await handle.writeFile(data, "utf8");
      await handle.sync();
    } finally {
      await handle.close();
    }
    await rename(temp, path);
  } catch (err) {
    await rm(temp, { force: true });
    throw err;
  }
}

/**
 * Reads a file that a flag or a setting names; the error names `what` and the file ("cannot read
 * --ca ca.pem: ENOENT").
 */
export async function readNamedFile(file: string, what: string): Promise<string> {
  try {
    return await readFile(file, "utf8");
  } catch (err) {
    throw new Error(`cannot read ${what} ${file}: ${errorCode(err) ?? (err as Error).message}`);
  }
}

function errorCode(err: unknown): string | undefined {
  return typeof err === "object" && err !== null && "code" in err ? String(err.code) : undefined;
}
