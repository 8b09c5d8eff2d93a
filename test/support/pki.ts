import {
  createCertificateAuthority,
  issueClientCertificate,
  issueServerCertificate,
  type ClientCertificateOptions,
  type IssuedCertificate,
} from "../../src/identity/ca.js";

/**
 * A throwaway PKI made in the test: a CA, a server certificate for loopback, and client
 * certificates on demand.
 */
export interface TestPki {
  readonly ca: IssuedCertificate;
  readonly server: IssuedCertificate;
  /** A client certificate with any shape, good or bad. */
  client(options: ClientCertificateOptions): Promise<IssuedCertificate>;
  /** A runner certificate: spiffe://<td>/runners/<runnerId>/workspaces/<workspaceId>. */
  runner(
    runnerId: string,
    workspaceId: string,
    options?: ClientCertificateOptions,
  ): Promise<IssuedCertificate>;
  /** A service identity: spiffe://<td>/services/<name>. */
  service(name: string, options?: ClientCertificateOptions): Promise<IssuedCertificate>;
}

/** Makes a fresh CA and server certificate for 127.0.0.1, ::1 and localhost. */
export async function createTestPki(trustDomain = "forelead"): Promise<TestPki> {
  const ca = await createCertificateAuthority({ commonName: "forelead test CA" });
  const server = await issueServerCertificate(ca, { hosts: ["127.0.0.1", "::1", "localhost"] });
  const client = (options: ClientCertificateOptions) => issueClientCertificate(ca, options);
  return {
    ca,
    server,
    client,
    runner: (runnerId, workspaceId, options = {}) =>
      client({
        uris: [`spiffe://${trustDomain}/runners/${runnerId}/workspaces/${workspaceId}`],
        ...options,
      }),
    service: (name, options = {}) =>
      client({ uris: [`spiffe://${trustDomain}/services/${name}`], ...options }),
  };
}
