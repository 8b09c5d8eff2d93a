// readLeafFields reads a client certificate's DER for the certificate policy
// (src/identity/leaf-fields.ts). Held to @peculiar/x509's reading of the same
// certificates, and to refusing malformed DER with its own error only.
import "reflect-metadata";
import { webcrypto } from "node:crypto";
import * as x509 from "@peculiar/x509";
import { beforeAll, describe, expect, it } from "vitest";
import { MalformedCertificateError, readLeafFields } from "../../src/identity/leaf-fields.js";

const alg = { name: "ECDSA", namedCurve: "P-256", hash: "SHA-256" } as const;
let keys: webcrypto.CryptoKeyPair;
beforeAll(async () => {
  keys = (await webcrypto.subtle.generateKey(alg, false, [
    "sign",
    "verify",
  ])) as webcrypto.CryptoKeyPair;
});

async function certificate(
  serialNumber: string,
  extensions: x509.Extension[],
): Promise<x509.X509Certificate> {
  return x509.X509CertificateGenerator.createSelfSigned({
    serialNumber,
    name: "CN=leaf",
    notBefore: new Date(Date.now() - 60_000),
    notAfter: new Date(Date.now() + 3_600_000),
    keys,
    signingAlgorithm: alg,
    extensions,
  });
}

const san = (items: x509.JsonGeneralNames) => new x509.SubjectAlternativeNameExtension(items);
const cases: Array<{ name: string; serial: string; extensions: () => x509.Extension[] }> = [
  {
    name: "one URI SAN, digitalSignature",
    serial: "01ab",
    extensions: () => [
      san([{ type: "url", value: "spiffe://forelead/runners/r1/workspaces/w1" }]),
      new x509.KeyUsagesExtension(x509.KeyUsageFlags.digitalSignature, true),
    ],
  },
  {
    name: "a serial with its top bit set (DER adds a 00)",
    serial: "80aa55",
    extensions: () => [san([{ type: "url", value: "spiffe://forelead/x" }])],
  },
  { name: "no extensions", serial: "05", extensions: () => [] },
  {
    name: "DNS, email and two URIs",
    serial: "7f",
    extensions: () => [
      san([
        { type: "dns", value: "a.example" },
        { type: "url", value: "spiffe://a/b" },
        { type: "email", value: "x@example.com" },
        { type: "url", value: "spiffe://a/c, URI:spiffe://a/d" },
      ]),
    ],
  },
  {
    name: "two subjectAltName extensions",
    serial: "0102",
    extensions: () => [
      san([{ type: "url", value: "spiffe://a/1" }]),
      san([{ type: "url", value: "spiffe://a/2" }]),
    ],
  },
  {
    name: "keyCertSign",
    serial: "11",
    extensions: () => [
      new x509.KeyUsagesExtension(
        x509.KeyUsageFlags.digitalSignature | x509.KeyUsageFlags.keyCertSign,
        true,
      ),
    ],
  },
  {
    name: "cRLSign only",
    serial: "12",
    extensions: () => [new x509.KeyUsagesExtension(x509.KeyUsageFlags.cRLSign, true)],
  },
  {
    name: "every usage but the signing ones",
    serial: "13",
    extensions: () => [
      new x509.KeyUsagesExtension(
        0x1ff & ~(x509.KeyUsageFlags.keyCertSign | x509.KeyUsageFlags.cRLSign),
        true,
      ),
    ],
  },
  {
    name: "basicConstraints cA=true",
    serial: "14",
    extensions: () => [new x509.BasicConstraintsExtension(true, 0, true)],
  },
  {
    name: "basicConstraints cA=false",
    serial: "15",
    extensions: () => [new x509.BasicConstraintsExtension(false, undefined, true)],
  },
];

describe("readLeafFields", () => {
  it.each(cases)("reads what @peculiar/x509 reads: $name", async ({ serial, extensions }) => {
    const cert = await certificate(serial, extensions());
    const fields = readLeafFields(new Uint8Array(cert.rawData));
    const usages = cert.getExtension(x509.KeyUsagesExtension)?.usages ?? 0;
    expect(fields).toEqual({
      serialHex: cert.serialNumber.toLowerCase(),
      uris: cert
        .getExtensions(x509.SubjectAlternativeNameExtension)
        .flatMap((e) => e.names.items.filter((n) => n.type === "url").map((n) => n.value)),
      signsCertificates:
        (usages & (x509.KeyUsageFlags.keyCertSign | x509.KeyUsageFlags.cRLSign)) !== 0,
      ca: cert.getExtension(x509.BasicConstraintsExtension)?.ca ?? false,
    });
  });

  it("the cases above cover each answer both ways", async () => {
    const all = await Promise.all(
      cases.map(async (c) =>
        readLeafFields(new Uint8Array((await certificate(c.serial, c.extensions())).rawData)),
      ),
    );
    expect(new Set(all.map((f) => f.signsCertificates))).toEqual(new Set([true, false]));
    expect(new Set(all.map((f) => f.ca))).toEqual(new Set([true, false]));
    expect(new Set(all.map((f) => f.uris.length))).toEqual(new Set([0, 1, 2]));
    expect(all[1]!.serialHex).toBe("80aa55"); // DER holds 00 80 aa 55
  });

  it(
    "every truncation and many corruptions of a certificate are refused with " +
      "MalformedCertificateError, never another error",
    async () => {
      const der = new Uint8Array((await certificate("01ab", cases[0]!.extensions())).rawData);
      const outcomes = new Set<string>();
      const attempt = (bytes: Uint8Array) => {
        try {
          readLeafFields(bytes);
          outcomes.add("read");
        } catch (err) {
          expect(err).toBeInstanceOf(MalformedCertificateError);
          outcomes.add("refused");
        }
      };
      for (let n = 0; n < der.length; n++) attempt(der.subarray(0, n));
      expect(outcomes).toEqual(new Set(["refused"]));
      // Flip one byte at a time to each of a few values (lengths and tags included).
      for (let i = 0; i < der.length; i++) {
        for (const v of [0x00, 0x7f, 0x80, 0x84, 0xff]) {
          const copy = der.slice();
          copy[i] = v;
          attempt(copy);
        }
      }
      expect(outcomes).toEqual(new Set(["refused", "read"]));
      expect(() => readLeafFields(Uint8Array.from([0x30, 0x84, 0xff, 0xff, 0xff, 0xff]))).toThrow(
        /runs past its enclosing element/,
      );
      expect(() => readLeafFields(Uint8Array.from([0x30, 0x80, 0x00, 0x00]))).toThrow(
        /unsupported length encoding/,
      );
    },
  );
});
