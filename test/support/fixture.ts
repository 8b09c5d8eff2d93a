import { afterAll, beforeAll } from "vitest";
import { adminActor, type AdminActor } from "./actors.js";
import { createRestClient, type RestClient } from "./clients.js";
import {
  startTestControlPlane,
  type TestControlPlane,
  type TestControlPlaneOptions,
} from "./control-plane.js";
import { createTestDatabase, type TestDatabase } from "./database.js";
import { createTestPki } from "./pki.js";

/** A test file's control plane with its admin actor. */
export interface ControlPlaneFixture extends TestControlPlane {
  /** The test-admin service speaking REST on one connection. */
  readonly admin: AdminActor;
}

/**
 * The file's control-plane options, or a function that makes them in beforeAll (when they need a
 * PKI or a directory made there).
 */
export type ControlPlaneFixtureOptions =
  TestControlPlaneOptions | (() => TestControlPlaneOptions | Promise<TestControlPlaneOptions>);

/**
 * Starts a control plane and its admin actor in beforeAll and closes both in
 * afterAll. The handle exists at once, so a file can write
 * `const cp = useControlPlane(); const { admin } = cp;` at the top; its members
 * reach the running plane when a hook or test uses them. Hooks registered after
 * this call run after the plane started (beforeAll) and before it closes (afterAll).
 */
export function useControlPlane(options: ControlPlaneFixtureOptions = {}): ControlPlaneFixture {
  let cp: TestControlPlane | undefined;
  let admin: AdminActor | undefined;
  const running = () => {
    if (!cp || !admin)
      throw new Error(
        "the test control plane is not running: useControlPlane() starts it in beforeAll and closes it in afterAll",
      );
    return { cp, admin };
  };
  const close = async () => {
    const [openAdmin, openPlane] = [admin, cp];
    admin = cp = undefined;
    await openAdmin?.close();
    await openPlane?.close();
  };
  beforeAll(async () => {
    cp = await startTestControlPlane(typeof options === "function" ? await options() : options);
    admin = await adminActor(cp);
  });
  afterAll(close);
  return {
    get plane() {
      return running().cp.plane;
    },
    get pki() {
      return running().cp.pki;
    },
    get database() {
      return running().cp.database;
    },
    get url() {
      return running().cp.url;
    },
    admin: {
      get rest() {
        return running().admin.rest;
      },
      enqueue: (overrides) => running().admin.enqueue(overrides),
      job: (jobId) => running().admin.job(jobId),
      cancel: (jobId) => running().admin.cancel(jobId),
      close: () => running().admin.close(),
    },
    close,
  };
}

/**
 * A REST client per service identity (spiffe://forelead/services/NAME), made
 * on each call with a certificate from the plane's PKI; all closed in afterAll.
 */
export function useServiceClients(cp: ControlPlaneFixture): (name: string) => Promise<RestClient> {
  const clients: RestClient[] = [];
  afterAll(async () => {
    await Promise.all(clients.map((c) => c.close()));
  });
  return async (name) => {
    const client = createRestClient(cp.url, cp.pki.ca.certPem, await cp.pki.service(name));
    clients.push(client);
    return client;
  };
}

/** Two control planes on one fresh Postgres database (DATABASE_URL) with one PKI: replicas. */
export interface ReplicaPair {
  readonly a: TestControlPlane;
  readonly b: TestControlPlane;
}

/**
 * Starts two replicas in beforeAll and closes them (and drops their
 * database) in afterAll. Postgres only: embedded databases are not shared.
 * Members reach the running planes when a hook or test uses them.
 */
export function useReplicaPair(options: TestControlPlaneOptions = {}): ReplicaPair {
  let database: TestDatabase | undefined;
  let planes: { a: TestControlPlane; b: TestControlPlane } | undefined;
  beforeAll(async () => {
    database = await createTestDatabase();
    const pki = await createTestPki();
    const a = await startTestControlPlane({ ...options, pki, database });
    planes = { a, b: await startTestControlPlane({ ...options, pki, database }) };
  });
  afterAll(async () => {
    await planes?.a.close();
    await planes?.b.close();
    await database?.drop();
  });
  const running = () => {
    if (!planes)
      throw new Error("the replicas are not running: useReplicaPair() starts them in beforeAll");
    return planes;
  };
  return {
    get a() {
      return running().a;
    },
    get b() {
      return running().b;
    },
  };
}
