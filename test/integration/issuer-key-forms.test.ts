// --issuer-key as operators have it: a CA made with openssl, its key in each
// PEM form openssl writes. The control plane starts with it and a runner
// enrolls and is served with the certificate it issued.
import { execFile } from "node:child_process";
import { mkdtemp, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { adminActor } from "../support/actors.js";
import { createRestClient } from "../support/clients.js";
import { startTestControlPlane } from "../support/control-plane.js";
import { databaseKind } from "../support/database.js";
import { enrollRequest, makeCsr } from "../support/identity.js";
import { createTestPki, type TestPki } from "../support/pki.js";

const openssl = (...args: string[]) => promisify(execFile)("openssl", args, { cwd: dir });
let dir: string;
let pki: TestPki;

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), "forelead-issuer-key-"));
  pki = await createTestPki();
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

/**
 * The openssl commands that write each form; the CA certificate is made from the key the same way
 * for all.
 */
const forms = {
  "SEC1 EC (openssl ecparam -genkey)": [
    "ecparam",
    "-name",
    "prime256v1",
    "-genkey",
    "-noout",
    "-out",
    "key.pem",
  ],
  "PKCS#8 EC (openssl genpkey)": [
    "genpkey",
    "-algorithm",
    "EC",
    "-pkeyopt",
    "ec_paramgen_curve:P-256",
    "-out",
    "key.pem",
  ],
  "PKCS#1 RSA (openssl genrsa -traditional)": ["genrsa", "-traditional", "-out", "key.pem", "2048"],
} as const;

describe(`--issuer-key in each PEM form openssl writes (${databaseKind})`, () => {
  it.each(Object.entries(forms))(
    "a CA key in %s starts the issuer, and a runner enrolls and is served with its certificate",
    { timeout: 60_000 },
    async (_form, genKey) => {
      await openssl(...genKey);
      await openssl(
        "req",
        "-x509",
        "-new",
        "-key",
        "key.pem",
        "-subj",
        "/CN=openssl issuing CA",
        "-days",
        "2",
        "-addext",
        "keyUsage=critical,keyCertSign,cRLSign",
        "-out",
        "ca.pem",
      );
      const issuer = {
        certPem: await readFile(join(dir, "ca.pem"), "utf8"),
        keyPem: await readFile(join(dir, "key.pem"), "utf8"),
      };
      const cp = await startTestControlPlane({
        pki,
        issuer,
        clientCaPem: pki.ca.certPem + issuer.certPem,
      });
      const admin = await adminActor(cp);
      try {
        const grant = await admin.rest.request("POST", "/v1/admin/enrollment-grants", {
          apiVersion: "v1",
          workspaceId: "w1",
        });
        expect(grant.status, grant.text).toBe(200);
        const { csrPem, keyPem } = await makeCsr();
        const enrolled = await enrollRequest(cp, {
          grant: grant.json.grant,
          runnerId: "e1",
          csr: csrPem,
        });
        expect(enrolled.status, enrolled.text).toBe(200);
        const runner = createRestClient(cp.url, pki.ca.certPem, {
          certPem: enrolled.json.certificateChain,
          keyPem,
        });
        expect((await runner.request("GET", "/v1/runner/clock")).status).toBe(200);
        await runner.close();
      } finally {
        await admin.close();
        await cp.close();
      }
    },
  );
});
