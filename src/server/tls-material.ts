// The listener's TLS material — server certificate, its key and the client
// trust bundle — as one reloadable value. Reloaded on SIGHUP and when a file
// changes (fs.watch on the directories holding them, so an atomic rename or a
// Kubernetes secret's symlink swap is seen; debounced, so a certificate and
// key written one after the other are read together). A reload that fails
// keeps what is served, logs why and is counted. New handshakes get the new
// material through server.setSecureContext; open connections keep theirs.
import { X509Certificate } from "node:crypto";
import { watch, type FSWatcher } from "node:fs";
import { basename, dirname } from "node:path";
import { createSecureContext, type SecureContextOptions } from "node:tls";
import type { Http2SecureServer, Http2Session } from "node:http2";
import { parseTrustBundle } from "../identity/certificate-policy.js";
import { readNamedFile } from "../identity/pki-files.js";

/** The files the PEMs were read from; given, they are watched and re-read on SIGHUP. */
export interface TlsFiles {
  readonly cert: string;
  readonly key: string;
  readonly clientCa: string;
}

/** The PEMs themselves. */
export interface TlsPems {
  readonly tlsCertPem: string;
  readonly tlsKeyPem: string;
  readonly clientCaPem: string;
}

/** What a reload did. */
type ReloadOutcome = "reloaded" | "unchanged" | "refused";

/** The material being served, and how its reloads went. */
export interface TlsMaterial {
  /** The client trust bundle now in force (the certificate policy reads it per new session). */
  readonly trustAnchors: readonly X509Certificate[];
  /** The serving certificate (the leaf). */
  readonly certificate: X509Certificate;
  /** Reloads that were refused since start. */
  readonly failedReloads: number;
  /** e.g. `CN=localhost (serial 1A2B…, valid until 2027-01-01T00:00:00.000Z)`. */
  describe(): string;
  /** The secure-context options of the current material, TLS 1.3 only. */
  contextOptions(): SecureContextOptions;
  /** Re-reads the files now (serialised with other reloads). Without files, "unchanged". */
  reload(reason: string): Promise<ReloadOutcome>;
  /**
   * Serves the material on `server`: every successful reload is set as its
   * secure context. With files, the first server served starts the SIGHUP
   * handler and the watchers, shared by every server; the last one stopped
   * stops them. Returns the function that stops serving `server`. `handshakeTimeoutMs` is the
   * server's bound on a TLS handshake (see handshakeUnderCurrentMaterial).
   */
  serveOn(server: Http2SecureServer, handshakeTimeoutMs: number): () => void;
  /**
   * Whether the TLS handshake of `session` was surely made with the material
   * now in force: the session began (its handshake done) more than the
   * handshake bound after the last reload, so the handshake began after it (a
   * TLS socket takes the server's secure context when it is created, and a
   * handshake that outlasts the bound is cut). Then its socket's `authorized`
   * is OpenSSL's verdict against the current client trust bundle. False for a
   * session of a server this material does not serve.
   */
  handshakeUnderCurrentMaterial(session: Http2Session): boolean;
}

const debounceMs = 200;

/**
 * Checks `pems` (certificate and key belong together, the bundle parses) and
 * returns them as reloadable material; throws at start on bad material.
 */
export function createTlsMaterial(
  pems: TlsPems,
  files: TlsFiles | undefined,
  log: (line: string) => void = console.log,
): TlsMaterial {
  let current = checkMaterial(pems);
  let failedReloads = 0;
  let chain: Promise<unknown> = Promise.resolve();
  const servers = new Set<Http2SecureServer>();
  /** When the last reload set new material (performance.now()); none yet: -Infinity. */
  let reloadedAt = -Infinity;
  /** When each session began (its handshake done), and the handshake bound of its server. */
  const handshakes = new WeakMap<Http2Session, { readonly at: number; readonly boundMs: number }>();

  const describe = () => describeCertificate(current.certificate);
  const contextOptions = (): SecureContextOptions => ({
    cert: current.pems.tlsCertPem,
    key: current.pems.tlsKeyPem,
    ca: current.pems.clientCaPem,
    minVersion: "TLSv1.3",
  });

  async function reloadNow(reason: string): Promise<ReloadOutcome> {
    if (!files) return "unchanged";
    let next: Checked;
    try {
      const pems = await readTlsFiles(files);
      if (
        pems.tlsCertPem === current.pems.tlsCertPem &&
        pems.tlsKeyPem === current.pems.tlsKeyPem &&
        pems.clientCaPem === current.pems.clientCaPem
      ) {
        if (reason === "SIGHUP")
          log(`forelead: SIGHUP: the TLS files are unchanged; still serving ${describe()}`);
        return "unchanged";
      }
      next = checkMaterial(pems);
      const expiry = Date.parse(next.certificate.validTo);
      if (expiry <= Date.now())
        throw new Error(`the new server certificate expired at ${new Date(expiry).toISOString()}`);
    } catch (err) {
      failedReloads++;
      log(
        `forelead: TLS reload (${reason}) refused, still serving ${describe()}: ` +
          `${(err as Error).message} (${failedReloads} refused ` +
          `reload${failedReloads === 1 ? "" : "s"} since start)`,
      );
      return "refused";
    }
    current = next;
    reloadedAt = performance.now();
    for (const server of servers) server.setSecureContext(contextOptions());
    log(
      `forelead: TLS material reloaded (${reason}): serving ${describe()}, ` +
        `client trust bundle of ${current.trustAnchors.length} ` +
        `certificate${current.trustAnchors.length === 1 ? "" : "s"}`,
    );
    return "reloaded";
  }

  const reload = (reason: string) => {
    const run = chain.then(() => reloadNow(reason));
    chain = run.catch(() => {});
    return run;
  };

  /**
   * The one SIGHUP handler and set of watchers of this material, however many servers it serves:
   * each reload reaches every server once (one log line, one count).
   */
  function startReloads(): () => void {
    if (!files) return () => {};
    const onHup = () => void reload("SIGHUP");
    process.on("SIGHUP", onHup);
    const watchers = watchFiles(files, () => void reload("file change"), log);
    return () => {
      process.off("SIGHUP", onHup);
      watchers();
    };
  }
  let stopReloads = () => {};

  return {
    get trustAnchors() {
      return current.trustAnchors;
    },
    get certificate() {
      return current.certificate;
    },
    get failedReloads() {
      return failedReloads;
    },
    describe,
    contextOptions,
    reload,
    handshakeUnderCurrentMaterial(session) {
      const handshake = handshakes.get(session);
      return handshake !== undefined && handshake.at > reloadedAt + handshake.boundMs;
    },
    serveOn(server, handshakeTimeoutMs) {
      servers.add(server);
      // An HTTP/2 session starts on its socket's secureConnection (its socket is a proxy, so the
      // session is the key).
      const onHandshake = (session: Http2Session) =>
        handshakes.set(session, { at: performance.now(), boundMs: handshakeTimeoutMs });
      server.on("session", onHandshake);
      if (servers.size === 1) stopReloads = startReloads();
      return () => {
        if (!servers.delete(server)) return;
        server.off("session", onHandshake);
        if (servers.size === 0) stopReloads();
      };
    },
  };
}

/**
 * How the files are named in errors: by default what they are; `forelead serve` passes its flags.
 */
const fileRoles: TlsFiles = {
  cert: "the server certificate",
  key: "the server key",
  clientCa: "the client CA bundle",
};

/** Reads the three files; an error names the one that cannot be read. */
export async function readTlsFiles(files: TlsFiles, names: TlsFiles = fileRoles): Promise<TlsPems> {
  return {
    tlsCertPem: await readNamedFile(files.cert, names.cert),
    tlsKeyPem: await readNamedFile(files.key, names.key),
    clientCaPem: await readNamedFile(files.clientCa, names.clientCa),
  };
}

interface Checked {
  readonly pems: TlsPems;
  readonly certificate: X509Certificate;
  readonly trustAnchors: readonly X509Certificate[];
}

function checkMaterial(pems: TlsPems): Checked {
  try {
    createSecureContext({ cert: pems.tlsCertPem, key: pems.tlsKeyPem });
  } catch (err) {
    throw new Error(
      `the TLS certificate and key cannot be used together: ${(err as Error).message}`,
    );
  }
  const trustAnchors = parseTrustBundle(pems.clientCaPem, "the client CA bundle");
  return { pems, certificate: new X509Certificate(pems.tlsCertPem), trustAnchors };
}

function describeCertificate(cert: X509Certificate): string {
  return (
    `${cert.subject.replace(/\n/g, ", ")} (serial ${cert.serialNumber}, ` +
    `valid until ${new Date(cert.validTo).toISOString()})`
  );
}

/** One watcher per directory; any change there schedules one reload after a quiet `debounceMs`. */
function watchFiles(
  files: TlsFiles,
  onChange: () => void,
  log: (line: string) => void,
): () => void {
  const names = new Set([files.cert, files.key, files.clientCa].map((f) => basename(f)));
  let timer: NodeJS.Timeout | undefined;
  const schedule = (name: string | null) => {
    // A Kubernetes secret volume swaps a "..data" symlink; editors write temp files beside.
    if (name !== null && !names.has(name) && !name.startsWith("..")) return;
    clearTimeout(timer);
    timer = setTimeout(onChange, debounceMs);
  };
  const watchers: FSWatcher[] = [];
  for (const dir of new Set([files.cert, files.key, files.clientCa].map((f) => dirname(f)))) {
    try {
      watchers.push(
        watch(dir, { persistent: false }, (_event, name) => schedule(name)).on("error", (err) =>
          log(
            `forelead: watching ${dir} for TLS changes failed (${err.message}); SIGHUP still reloads`,
          ),
        ),
      );
    } catch (err) {
      log(
        `forelead: cannot watch ${dir} for TLS changes (${(err as Error).message}); SIGHUP still reloads`,
      );
    }
  }
  return () => {
    clearTimeout(timer);
    watchers.forEach((w) => w.close());
  };
}
