import { mkdtemp, rm } from "node:fs/promises";
import http2 from "node:http2";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { Http2Session } from "node:http2";
import type { AddressInfo } from "node:net";
import { createSecureContext } from "node:tls";
import { createContextValues, type ContextValues } from "@connectrpc/connect";
import { AdminService } from "../../gen/forelead/admin/v1/admin_pb.js";
import { EnrollService } from "../../gen/forelead/enroll/v1/enroll_pb.js";
import { RunnerService } from "../../gen/forelead/runner/v1/runner_pb.js";
import { createAdminService } from "../api/admin-service.js";
import { createEnrollService } from "../api/enroll-service.js";
import type { BatcherOptions } from "../broker/batcher.js";
import { jobWorkspace } from "../broker/job-workspace.js";
import { createBroker, type Broker } from "../broker/broker.js";
import { createCodeHost, type CodeHost } from "../code/code-host.js";
import { createArtifacts, type Artifacts } from "../artifacts/artifacts.js";
import { requestIdentityKey } from "../api/context.js";
import { services as serviceList } from "../api/services.js";
import { createApiHandler, serviceImpl } from "../api/surfaces.js";
import { createRunnerService } from "../api/runner-service.js";
import { createDatabaseAuditSink, type AuditSink } from "../identity/audit.js";
import { parseTrustBundle } from "../identity/certificate-policy.js";
import { createIssuer, type Issuer, type IssuerMaterial } from "../identity/issuer.js";
import { createRetirements, type Retirements } from "../identity/retirement.js";
import { createRoleTable, type RoleGrant } from "../identity/roles.js";
import { createInventory } from "../inventory/inventory.js";
import { openStore, type Store } from "../store/database.js";
import { createStreams, type Streams } from "../streams/streams.js";
import { createDbClock, type DbClock } from "../store/db-clock.js";
import { createRequestIdentifier } from "./identity.js";
import { createProcedureCheck } from "./procedure-check.js";

/** Everything `forelead serve` needs, already read from flags and files. */
export interface ControlPlaneOptions {
  readonly host: string;
  /** 0 picks a free port. */
  readonly port: number;
  readonly tlsCertPem: string;
  readonly tlsKeyPem: string;
  /** The client trust bundle (PEM). */
  readonly clientCaPem: string;
  readonly trustDomain: string;
  /** postgres:// URL, a directory for the embedded database, or "memory://". */
  readonly database: string;
  /** SPIFFE IDs granted the admin role (`--admin`). */
  readonly admins: readonly string[];
  /** Further roles for service identities (`--grant ID=read`, `--grant ID=enqueue:w1,w2`). */
  readonly grants?: readonly RoleGrant[];
  /** The CA that signs runner certificates on enroll and renew; without one, both are refused. */
  readonly issuer?: IssuerMaterial;
  /** Lifetime of the certificates the issuer signs; the maximum certificate lifetime by default. */
  readonly issuedCertLifetimeMs?: number;
  readonly leaseSeconds: number;
  readonly maxCertLifetimeMs: number;
  /** Byte bound of one request body; 1 MiB by default. */
  readonly maxBodyBytes?: number;
  /** How often expired leases are swept; 1 s by default. */
  readonly sweepIntervalMs?: number;
  /** Where repository mirrors and scratch files live; a private temporary directory when omitted. */
  readonly codeDir?: string;
  /** Cap of one git bundle, sent or received; 256 MiB by default. */
  readonly maxBundleBytes?: number;
  /**
   * Where artifacts live (blobs/ and staging/); replicas must share it.
   * Default: a fresh temporary directory, removed at close (tests).
   */
  readonly artifactsDir?: string;
  /** Largest artifact an upload may declare; 2 GiB by default. */
  readonly maxArtifactBytes?: number;
  /** An events or logs request still open after this many seconds is ended by the server; 30 by default. */
  readonly streamMaxSeconds?: number;
  /** How the broker batches claims and completions; its default unless given (benchmarks compare). */
  readonly batching?: BatcherOptions;
}

/** A running control plane. */
export interface ControlPlane {
  readonly url: string;
  readonly port: number;
  readonly store: Store;
  readonly audit: AuditSink;
  readonly broker: Broker;
  /** The issuer's description, or undefined when it has none. */
  readonly issuer: string | undefined;
  readonly artifacts: Artifacts;
  /** Stops accepting, closes client sessions, then the database. */
  close(): Promise<void>;
}

const defaultMaxBodyBytes = 1024 * 1024;

/** Starts a control plane: database (migrated), then the HTTP/2 mTLS listener. */
export async function startControlPlane(options: ControlPlaneOptions): Promise<ControlPlane> {
  // Fail on bad TLS material before touching the database: the message names what is wrong.
  try {
    createSecureContext({ cert: options.tlsCertPem, key: options.tlsKeyPem });
  } catch (err) {
    throw new Error(`the TLS certificate and key cannot be used together: ${(err as Error).message}`);
  }
  const trustAnchors = parseTrustBundle(options.clientCaPem, "the client CA bundle");
  const roles = createRoleTable(options.grants ?? [], options.admins);
  const issuedLifetimeMs = options.issuedCertLifetimeMs ?? options.maxCertLifetimeMs;
  if (issuedLifetimeMs > options.maxCertLifetimeMs) {
    throw new Error(`the issued certificate lifetime (${issuedLifetimeMs} ms) is over the maximum this control plane accepts (${options.maxCertLifetimeMs} ms)`);
  }
  const issuer: Issuer | undefined = options.issuer ? await createIssuer(options.issuer, trustAnchors, issuedLifetimeMs) : undefined;
  const store = await openStore(options.database);
  let clock: DbClock | undefined;
  let audit: AuditSink | undefined;
  let broker: Broker | undefined;
  let retirements: Retirements | undefined;
  let code: CodeHost | undefined;
  let artifacts: Artifacts | undefined;
  let tempArtifactsDir: string | undefined;
  let streams: Streams | undefined;
  try {
    if (!options.artifactsDir) tempArtifactsDir = await mkdtemp(join(tmpdir(), "forelead-artifacts-"));
    clock = await createDbClock(store.db);
    audit = createDatabaseAuditSink(store.db);
    const maxBodyBytes = options.maxBodyBytes ?? defaultMaxBodyBytes;
    retirements = await createRetirements(store);
    const runnerRefusal = retirements.refusal;
    const guardOptions = { trustDomain: options.trustDomain, roles, audit, runnerRefusal, jobWorkspace: (jobId: string) => jobWorkspace(store.db, jobId) };
    const enrollment = { db: store.db, issuer, trustDomain: options.trustDomain, runnerRefusal };
    code = await createCodeHost({ db: store.db, ...(options.codeDir ? { codeDir: options.codeDir } : {}), ...(options.maxBundleBytes ? { maxBundleBytes: options.maxBundleBytes } : {}) });
    broker = await createBroker({ store, leaseSeconds: options.leaseSeconds, code, ...(options.sweepIntervalMs ? { sweepIntervalMs: options.sweepIntervalMs } : {}), ...(options.batching ? { batching: options.batching } : {}) });
    const inventory = createInventory(store.db);
    artifacts = await createArtifacts({ db: store.db, dir: options.artifactsDir ?? tempArtifactsDir!, ...(options.maxArtifactBytes ? { maxArtifactBytes: options.maxArtifactBytes } : {}) });
    streams = await createStreams({ store, maxRequestBytes: maxBodyBytes, ...(options.streamMaxSeconds ? { maxRequestMs: options.streamMaxSeconds * 1000 } : {}) });
    // One implementation per service of src/api/services.ts: the list the route docs are made from.
    const implementations = [
      serviceImpl(RunnerService, createRunnerService({ store, clock, broker, inventory, enrollment, code, artifacts, streams })),
      serviceImpl(AdminService, createAdminService({ broker, inventory, store, audit, retirements, code, artifacts, streams })),
      serviceImpl(EnrollService, createEnrollService(enrollment)),
    ];
    const identify = createRequestIdentifier({ trustDomain: options.trustDomain, maxLifetimeMs: options.maxCertLifetimeMs, trustAnchors });
    // One set of context values per request: the procedure check, Connect and the REST router share it.
    const valuesOf = new WeakMap<http2.Http2ServerRequest, ContextValues>();
    const contextValues = (req: http2.Http2ServerRequest) => {
      let values = valuesOf.get(req);
      if (!values) valuesOf.set(req, (values = createContextValues().set(requestIdentityKey, identify(req))));
      return values;
    };
    const checkProcedure = createProcedureCheck(serviceList, guardOptions);
    const connectHandler = createApiHandler({ implementations, guard: guardOptions, contextValues, maxBodyBytes });
    const handler = (req: http2.Http2ServerRequest, res: http2.Http2ServerResponse) => {
      checkProcedure(req, contextValues(req));
      connectHandler(req, res);
    };
    const server = http2.createSecureServer(
      {
        cert: options.tlsCertPem,
        key: options.tlsKeyPem,
        ca: options.clientCaPem,
        requestCert: true,
        // The policy decides per request, with a message; a TLS alert would tell the client nothing.
        rejectUnauthorized: false,
        minVersion: "TLSv1.3",
        ALPNProtocols: ["h2"],
        allowHTTP1: false,
        // A 1 MiB request body (an NDJSON stream request) arrives in one flow-control window, so the
        // server stores it with one commit instead of one per 64 KiB window (measured: 3 batches per
        // 66 KB logs request with the default window, 1 with this; about twice the lines/s).
        settings: { initialWindowSize: 1 << 20 },
      },
      handler,
    );
    // A TLS client that offered no ALPN gets past the handshake; Node would answer it in plain
    // HTTP/1.0 and keep the socket for 10 s. Close it at once instead.
    server.on("unknownProtocol", (socket) => socket.destroy());
    const sessions = new Set<Http2Session>();
    server.on("session", (s: Http2Session) => {
      sessions.add(s);
      s.setLocalWindowSize(4 << 20); // the connection's window: a runner's streams of several leases share it
      s.once("close", () => sessions.delete(s));
    });
    await new Promise<void>((resolve, reject) => {
      server.once("error", reject);
      server.listen(options.port, options.host, () => {
        server.off("error", reject);
        resolve();
      });
    });
    const port = (server.address() as AddressInfo).port;
    const host = options.host.includes(":") ? `[${options.host}]` : options.host;
    let closing: Promise<void> | undefined;
    const auditSink = audit;
    const dbClock = clock;
    const jobBroker = broker;
    const retired = retirements;
    const codeHost = code;
    const artifactService = artifacts;
    const removeOnClose = tempArtifactsDir;
    const jobStreams = streams;
    return {
      url: `https://${host}:${port}`,
      port,
      store,
      audit: auditSink,
      broker: jobBroker,
      issuer: issuer?.description,
      artifacts: artifactService,
      close() {
        closing ??= (async () => {
          const closed = new Promise<void>((resolve) => server.close(() => resolve()));
          for (const s of sessions) s.close();
          await jobStreams.close(); // ends followers, whose open streams would hold their sessions
          const forced = setTimeout(() => sessions.forEach((s) => s.destroy()), 5_000);
          await closed;
          clearTimeout(forced);
          await jobBroker.close();
          await retired.close();
          await codeHost.close();
          await artifactService.close();
          if (removeOnClose) await rm(removeOnClose, { recursive: true, force: true });
          dbClock.close();
          await auditSink.close();
          await store.close();
        })();
        return closing;
      },
    };
  } catch (err) {
    await broker?.close().catch(() => {});
    await retirements?.close().catch(() => {});
    await code?.close().catch(() => {});
    await artifacts?.close().catch(() => {});
    if (tempArtifactsDir) await rm(tempArtifactsDir, { recursive: true, force: true });
    await streams?.close().catch(() => {});
    clock?.close();
    await audit?.close().catch(() => {});
    await store.close();
    throw err;
  }
}
