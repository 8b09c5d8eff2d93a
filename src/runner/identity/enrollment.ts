// The runner's own identity: a key made on the runner (it never leaves it), a
// certificate from enrollment, renewed at about half its lifetime over mTLS.
// Key and certificate live in a state directory (0700; files 0600) and are
// replaced as a pair, so a crash mid-renewal never leaves a key that does not
// match its certificate. After a renewal the caller opens a new HTTP/2
// connection: TLS reads a certificate only on a new handshake.
import "reflect-metadata";
import http2 from "node:http2";
import { X509Certificate, createPrivateKey, type webcrypto } from "node:crypto";
import { mkdir, readFile, rename, rm } from "node:fs/promises";
import { join } from "node:path";
import * as x509 from "@peculiar/x509";
import { writeFileAtomic } from "../../identity/pki-files.js";
import { parseSpiffeId } from "../../identity/spiffe.js";

x509.cryptoProvider.set(globalThis.crypto);

/** A runner certificate with its key and the identity it names. */
export interface RunnerIdentity {
  /** The certificate then any intermediates, PEM. */
  readonly certPem: string;
  /** PKCS#8 PEM. */
  readonly keyPem: string;
  readonly spiffeId: string;
  readonly runnerId: string;
  readonly workspaceId: string;
  readonly serialHex: string;
  readonly notBefore: Date;
  readonly notAfter: Date;
}

/** Where the control plane is and how to trust it. */
export interface ControlPlaneEndpoint {
  /** e.g. https://cp.example:8443 */
  readonly server: string;
  /** The CA bundle that verifies the control plane's server certificate. */
  readonly caPem: string;
}

/** Key types a runner may enroll with. */
export type RunnerKeyAlgorithm = "P-256" | "Ed25519";

/** File names inside the state directory. */
export const stateFiles = { cert: "cert.pem", key: "key.pem" } as const;

/** A new key pair and a PKCS#10 request signed by it; the subject is informational only. */
export async function createKeyAndCsr(runnerId: string, algorithm: RunnerKeyAlgorithm = "P-256"): Promise<{ keyPem: string; csrPem: string }> {
  const params = algorithm === "Ed25519" ? { name: "Ed25519" } : { name: "ECDSA", namedCurve: "P-256" };
  const keys = (await globalThis.crypto.subtle.generateKey(params, true, ["sign", "verify"])) as webcrypto.CryptoKeyPair;
  const csr = await x509.Pkcs10CertificateRequestGenerator.create({
    name: new x509.Name([{ CN: [{ utf8String: runnerId }] }]),
    keys,
    signingAlgorithm: algorithm === "Ed25519" ? { name: "Ed25519" } : { name: "ECDSA", hash: "SHA-256" },
  });
  const pkcs8 = await globalThis.crypto.subtle.exportKey("pkcs8", keys.privateKey);
  return { keyPem: `${x509.PemConverter.encode(pkcs8, "PRIVATE KEY")}\n`, csrPem: `${csr.toString("pem")}\n` };
}

/**
 * Enrolls: makes a key and CSR, exchanges them with the grant for a
 * certificate (POST /v1/enroll, no client certificate), and stores both in
 * `stateDir`.
 */
export async function enroll(endpoint: ControlPlaneEndpoint, opts: { grant: string; runnerId: string; stateDir: string; keyAlgorithm?: RunnerKeyAlgorithm }): Promise<RunnerIdentity> {
  const { keyPem, csrPem } = await createKeyAndCsr(opts.runnerId, opts.keyAlgorithm);
  const reply = await postJson(endpoint, undefined, "/v1/enroll", { apiVersion: "v1", grant: opts.grant, runnerId: opts.runnerId, csr: csrPem });
  const identity = identityOf(String(reply.certificateChain ?? ""), keyPem);
  await saveIdentity(opts.stateDir, identity);
  return identity;
}

/** Renews over mTLS with the current identity (POST /v1/runner/certificate) and stores the new pair. */
export async function renew(endpoint: ControlPlaneEndpoint, current: RunnerIdentity, stateDir: string, keyAlgorithm?: RunnerKeyAlgorithm): Promise<RunnerIdentity> {
  const { keyPem, csrPem } = await createKeyAndCsr(current.runnerId, keyAlgorithm);
  const reply = await postJson(endpoint, current, "/v1/runner/certificate", { apiVersion: "v1", csr: csrPem });
  const identity = identityOf(String(reply.certificateChain ?? ""), keyPem);
  if (identity.spiffeId !== current.spiffeId) throw new Error(`the renewed certificate names ${identity.spiffeId}, not ${current.spiffeId}; keeping the current one`);
  await saveIdentity(stateDir, identity);
  return identity;
}

/** Reads the identity in `stateDir`, finishing a pair replacement a crash interrupted. */
export async function loadIdentity(stateDir: string): Promise<RunnerIdentity> {
  const path = (name: string) => join(stateDir, name);
  const read = (name: string) => readFile(path(name), "utf8").catch(() => undefined);
  const [cert, key, nextCert, nextKey] = await Promise.all([read(stateFiles.cert), read(stateFiles.key), read(`${stateFiles.cert}.next`), read(`${stateFiles.key}.next`)]);
  // saveIdentity renames the key first, then the certificate: a crash in between leaves cert.pem.next.
  if (nextCert !== undefined && nextKey === undefined && key !== undefined && matches(nextCert, key)) {
    await rename(path(`${stateFiles.cert}.next`), path(stateFiles.cert));
    return identityOf(nextCert, key);
  }
  await rm(path(`${stateFiles.cert}.next`), { force: true });
  await rm(path(`${stateFiles.key}.next`), { force: true });
  if (cert === undefined || key === undefined) {
    throw new Error(`${stateDir} holds no runner identity (${stateFiles.cert} and ${stateFiles.key}); run \`forelead runner enroll --state-dir ${stateDir} ...\` first`);
  }
  if (!matches(cert, key)) throw new Error(`${join(stateDir, stateFiles.key)} does not belong to ${join(stateDir, stateFiles.cert)}; enroll again`);
  return identityOf(cert, key);
}

/** Writes key and certificate: both to ".next" files first, then renamed key first (see loadIdentity). */
export async function saveIdentity(stateDir: string, identity: RunnerIdentity): Promise<void> {
  await mkdir(stateDir, { recursive: true, mode: 0o700 });
  const path = (name: string) => join(stateDir, name);
  await writeFileAtomic(path(`${stateFiles.key}.next`), identity.keyPem, 0o600);
  await writeFileAtomic(path(`${stateFiles.cert}.next`), identity.certPem, 0o600);
  await rename(path(`${stateFiles.key}.next`), path(stateFiles.key));
  await rename(path(`${stateFiles.cert}.next`), path(stateFiles.cert));
}

/**
 * Milliseconds until the identity should be renewed: half its lifetime, with
 * ±10 % jitter so a fleet enrolled together does not renew together.
 */
export function renewalDelayMs(identity: Pick<RunnerIdentity, "notBefore" | "notAfter">, now = Date.now(), random = Math.random): number {
  const start = identity.notBefore.getTime();
  const lifetime = identity.notAfter.getTime() - start;
  return Math.max(0, start + lifetime * (0.5 + (random() - 0.5) * 0.2) - now);
}

/** Keeps an identity renewed in the background. */
export interface IdentityKeeper {
  current(): RunnerIdentity;
  /** Called with each new identity: open new connections with it. Returns an unsubscribe function. */
  onRenewed(listener: (identity: RunnerIdentity) => void): () => void;
  /** Renews now (the timer calls this too). */
  renewNow(): Promise<RunnerIdentity>;
  stop(): void;
}

/** Options of keepIdentityFresh. */
export interface KeeperOptions {
  readonly stateDir: string;
  readonly keyAlgorithm?: RunnerKeyAlgorithm;
  /** Told about each failed renewal; the keeper retries with backoff until the certificate expires. */
  readonly onError?: (err: Error, retryInMs: number | undefined) => void;
}

/**
 * Renews `identity` at about half its lifetime (renewalDelayMs), then keeps
 * renewing each new one. A failed renewal is retried after 5 s, doubling up
 * to 5 min, while the certificate is still valid; a refusal that says the
 * runner is retired stops it.
 */
export function keepIdentityFresh(endpoint: ControlPlaneEndpoint, identity: RunnerIdentity, options: KeeperOptions): IdentityKeeper {
  let current = identity;
  let timer: NodeJS.Timeout | undefined;
  let stopped = false;
  let failures = 0;
  const listeners = new Set<(identity: RunnerIdentity) => void>();
  const schedule = (ms: number) => {
    if (stopped) return;
    clearTimeout(timer);
    timer = setTimeout(() => void renewNow().catch(() => {}), ms);
    timer.unref();
  };
  const renewNow = async () => {
    try {
      current = await renew(endpoint, current, options.stateDir, options.keyAlgorithm);
    } catch (err) {
      failures++;
      const backoff = Math.min(5_000 * 2 ** (failures - 1), 300_000);
      const retry = /retired/.test((err as Error).message) || current.notAfter.getTime() <= Date.now() ? undefined : backoff;
      options.onError?.(err as Error, retry);
      if (retry !== undefined) schedule(retry);
      throw err;
    }
    failures = 0;
    schedule(renewalDelayMs(current));
    for (const l of listeners) l(current);
    return current;
  };
  schedule(renewalDelayMs(current));
  return {
    current: () => current,
    onRenewed(listener) {
      listeners.add(listener);
      return () => listeners.delete(listener);
    },
    renewNow,
    stop() {
      stopped = true;
      clearTimeout(timer);
    },
  };
}

/** TLS options of an HTTP/2 connection with an identity (for http2.connect or a Connect transport's nodeOptions). */
export function tlsOptions(endpoint: ControlPlaneEndpoint, identity: RunnerIdentity | undefined): http2.SecureClientSessionOptions {
  return { ca: endpoint.caPem, ...(identity ? { cert: identity.certPem, key: identity.keyPem } : {}) };
}

/** One HTTP/2 connection that follows the keeper: after each renewal, requests go on a new connection. */
export interface RunnerConnection {
  /** The session of the current certificate, (re)opened when needed. */
  session(): http2.ClientHttp2Session;
  close(): Promise<void>;
}

/**
 * Opens connections with the keeper's identity. On renewal the next request
 * opens a new connection (a new handshake, so the new certificate); the old
 * one is closed gracefully, letting its streams in flight finish.
 */
export function connectWithIdentity(endpoint: ControlPlaneEndpoint, keeper: IdentityKeeper): RunnerConnection {
  let open: http2.ClientHttp2Session | undefined;
  const unsubscribe = keeper.onRenewed(() => {
    open?.close();
    open = undefined;
  });
  return {
    session() {
      if (!open || open.closed || open.destroyed) {
        const s = http2.connect(endpoint.server, tlsOptions(endpoint, keeper.current()));
        s.on("error", () => {}); // surfaced on the request that meets it
        s.once("close", () => open === s && (open = undefined));
        open = s;
      }
      return open;
    },
    async close() {
      unsubscribe();
      const s = open;
      open = undefined;
      if (s && !s.closed) await new Promise<void>((resolve) => s.close(() => resolve()));
    },
  };
}

/** POSTs JSON on a one-off connection; throws with the control plane's message on an error status. */
async function postJson(endpoint: ControlPlaneEndpoint, identity: RunnerIdentity | undefined, path: string, body: unknown): Promise<Record<string, unknown>> {
  const session = http2.connect(endpoint.server, tlsOptions(endpoint, identity));
  try {
    const { status, text } = await new Promise<{ status: number; text: string }>((resolve, reject) => {
      session.once("error", reject);
      const stream = session.request({ ":method": "POST", ":path": path, "content-type": "application/json" });
      let status = 0;
      const chunks: Buffer[] = [];
      stream.on("response", (h) => (status = Number(h[":status"])));
      stream.on("data", (c: Buffer) => chunks.push(c));
      stream.on("error", reject);
      stream.on("end", () => resolve({ status, text: Buffer.concat(chunks).toString("utf8") }));
      stream.end(JSON.stringify(body));
    });
    let json: Record<string, unknown> = {};
    try {
      json = text ? (JSON.parse(text) as Record<string, unknown>) : {};
    } catch {
      // not JSON: reported below by status
    }
    if (status !== 200) throw new Error(`${path}: ${status} ${String(json.code ?? "")}: ${String(json.message ?? text.slice(0, 200))}`);
    return json;
  } finally {
    session.close();
  }
}

function matches(certPem: string, keyPem: string): boolean {
  try {
    return new X509Certificate(certPem).checkPrivateKey(createPrivateKey(keyPem));
  } catch {
    return false;
  }
}

/** Reads the identity a certificate names; refuses one whose key is not `keyPem` or that is not a runner's. */
function identityOf(certPem: string, keyPem: string): RunnerIdentity {
  if (!certPem.includes("-----BEGIN CERTIFICATE-----")) throw new Error("the control plane's reply holds no certificate");
  if (!matches(certPem, keyPem)) throw new Error("the certificate does not belong to this runner's key");
  const leaf = new x509.X509Certificate(certPem);
  const uris = leaf.getExtensions(x509.SubjectAlternativeNameExtension).flatMap((e) => e.names.items.filter((n) => n.type === "url").map((n) => n.value));
  if (uris.length !== 1) throw new Error(`the certificate has ${uris.length} URI SANs; a runner certificate has exactly one`);
  const id = parseSpiffeId(uris[0]!);
  const [runners, runnerId, workspaces, workspaceId] = id.segments;
  if (id.segments.length !== 4 || runners !== "runners" || workspaces !== "workspaces") throw new Error(`${id.text} is not a runner identity`);
  return { certPem, keyPem, spiffeId: id.text, runnerId: runnerId!, workspaceId: workspaceId!, serialHex: leaf.serialNumber.toLowerCase(), notBefore: leaf.notBefore, notAfter: leaf.notAfter };
}
