import type { X509Certificate } from "node:crypto";
import type { ArtifactStore } from "../artifacts/store.js";
import type { AuditBacklog, AuditSink } from "../identity/audit.js";
import type { Store } from "../store/database.js";
import { runDoctor, type DoctorCheck } from "./doctor.js";
import type { ReplicaHeartbeat } from "./replicas.js";
import type { Retention } from "./retention.js";
import { readDatabaseFacts, readFleetStatus, type FleetStatus } from "./status.js";

/** What the status and doctor routes read, handed in by the composition root. */
export interface OperatorViewDeps {
  readonly store: Store;
  readonly audit: AuditSink;
  /** The TLS material being served now (it may be reloaded). */
  readonly server: () => {
    readonly certificate: X509Certificate;
    readonly certPem: string;
    readonly keyPem: string;
  };
  readonly issuer?: { readonly certPem: string; readonly keyPem: string; readonly notAfter: Date };
  readonly artifacts: ArtifactStore;
  readonly replica: ReplicaHeartbeat;
  readonly retention: Retention;
  /** A runner silent this long is offline (forelead_runner_state). */
  readonly runnerOfflineSeconds: number;
  readonly build: { readonly version: string; readonly commit: string; readonly buildDate: string };
}

/** The status of this control plane, its database and its fleet. */
interface OperatorStatus extends FleetStatus {
  readonly build: OperatorViewDeps["build"];
  readonly startedAt: Date;
  readonly database: {
    readonly kind: "pglite" | "postgres";
    readonly reachable: boolean;
    readonly roundTripMs: number;
    readonly migration: string;
    readonly listenConnected: boolean;
    readonly audit: AuditBacklog;
  };
  readonly serverNotAfter: Date;
  readonly issuerNotAfter: Date | undefined;
}

/** The operator's two views of a running control plane. */
export interface OperatorView {
  status(): Promise<OperatorStatus>;
  doctor(): Promise<DoctorCheck[]>;
}

/** Binds the status and the doctor to the running control plane's parts. */
export function createOperatorView(deps: OperatorViewDeps): OperatorView {
  const { store } = deps;
  return {
    async status() {
      const facts = await readDatabaseFacts(store.db);
      const fleet = await readFleetStatus(store.db, deps.runnerOfflineSeconds);
      return {
        ...fleet,
        build: deps.build,
        startedAt: deps.replica.startedAt,
        database: {
          kind: store.kind === "embedded" ? "pglite" : "postgres",
          reachable: facts.reachable,
          roundTripMs: facts.roundTripMs,
          migration: facts.migration,
          listenConnected: store.listening,
          audit: deps.audit.backlog(),
        },
        serverNotAfter: new Date(deps.server().certificate.validTo),
        issuerNotAfter: deps.issuer?.notAfter,
      };
    },
    doctor: () =>
      runDoctor({
        server: deps.server(),
        issuer: deps.issuer,
        database: { db: store.db },
        pendingMigrations: "fail",
        listenConnected: () => store.listening,
        artifacts: deps.artifacts,
        audit: deps.audit,
        retention: () => deps.retention.report(),
      }),
  };
}
