import {
  startControlPlane,
  type ControlPlane,
  type ControlPlaneOptions,
} from "../../src/server/control-plane.js";
import { createTestDatabase, testSecretsKeys, type TestDatabase } from "./database.js";
import { createTestPki, type TestPki } from "./pki.js";

/** A control plane on a loopback port with a PKI and database made for the test. */
export interface TestControlPlane {
  readonly plane: ControlPlane;
  readonly pki: TestPki;
  readonly database: TestDatabase;
  readonly url: string;
  /** Closes the control plane and drops its database. */
  close(): Promise<void>;
}

/** The admin identity every test control plane grants. */
export const testAdminId = "spiffe://forelead/services/test-admin";

/**
 * What a test may change of a test control plane: any option but the database location, and the PKI
 * or database to share.
 */
export type TestControlPlaneOptions = Partial<Omit<ControlPlaneOptions, "database">> & {
  pki?: TestPki;
  database?: TestDatabase;
};

/** Starts a control plane on 127.0.0.1:0; pass `pki`/`database` to share them between replicas. */
export async function startTestControlPlane(
  overrides: TestControlPlaneOptions = {},
): Promise<TestControlPlane> {
  const { pki: givenPki, database: givenDb, ...options } = overrides;
  const pki = givenPki ?? (await createTestPki());
  const database = givenDb ?? (await createTestDatabase());
  const plane = await startControlPlane({
    host: "127.0.0.1",
    port: 0,
    tlsCertPem: pki.server.certPem,
    tlsKeyPem: pki.server.keyPem,
    clientCaPem: pki.ca.certPem,
    trustDomain: "forelead",
    database: database.location,
    admins: [testAdminId],
    leaseSeconds: 30,
    maxCertLifetimeMs: 24 * 3600 * 1000,
    secretsKeys: testSecretsKeys(database.location),
    ...options,
  });
  return {
    plane,
    pki,
    database,
    url: plane.url,
    async close() {
      await plane.close();
      if (!givenDb) await database.drop();
    },
  };
}
