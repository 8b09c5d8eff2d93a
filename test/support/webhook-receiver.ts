import { createHmac, timingSafeEqual } from "node:crypto";
import { createServer, type Server } from "node:https";
import type { AddressInfo } from "node:net";
import {
  createCertificateAuthority,
  issueServerCertificate,
  type IssuedCertificate,
} from "../../src/identity/ca.js";

/** One POST a receiver took, its signature checked as docs/webhooks.md tells receivers to. */
interface ReceivedDelivery {
  readonly deliveryId: string;
  readonly eventType: string;
  readonly body: Record<string, unknown>;
  readonly signatureValid: boolean;
  readonly at: number;
}

/** A local HTTPS receiver with a CA of its own (give `ca` to --webhook-ca). */
export interface WebhookReceiver {
  readonly ca: IssuedCertificate;
  readonly port: number;
  readonly url: (path: string) => string;
  /** Every POST, by path, in the order they came. */
  readonly received: (path: string) => ReceivedDelivery[];
  /** The status a path answers next (then 200 when the list is used up). */
  script(path: string, statuses: number[]): void;
  /** Stops listening (connections are refused) and listens again on the same port. */
  stop(): Promise<void>;
  start(): Promise<void>;
  close(): Promise<void>;
}

/** Verifies `forelead-signature` over the raw body: the receiver's side of the rule. */
function verifySignature(secret: string, header: string, body: string): boolean {
  const parts = Object.fromEntries(header.split(",").map((p) => p.split("=", 2)));
  const expected = createHmac("sha256", secret).update(`${parts.t}.${body}`).digest();
  const given = Buffer.from(String(parts.v1 ?? ""), "hex");
  return given.length === expected.length && timingSafeEqual(given, expected);
}

/** Starts a receiver on 127.0.0.1 whose deliveries are signed with `secret`. */
export async function startWebhookReceiver(secret: string): Promise<WebhookReceiver> {
  const ca = await createCertificateAuthority({ commonName: "webhook receiver test CA" });
  const cert = await issueServerCertificate(ca, { hosts: ["127.0.0.1", "localhost"] });
  const byPath = new Map<string, ReceivedDelivery[]>();
  const scripts = new Map<string, number[]>();
  const make = (): Server =>
    createServer({ cert: cert.certPem, key: cert.keyPem }, (req, res) => {
      const chunks: Buffer[] = [];
      req.on("data", (c: Buffer) => chunks.push(c));
      req.on("end", () => {
        const body = Buffer.concat(chunks).toString("utf8");
        const path = req.url ?? "/";
        const list = byPath.get(path) ?? [];
        byPath.set(path, list);
        list.push({
          deliveryId: String(req.headers["forelead-delivery"]),
          eventType: String(req.headers["forelead-event"]),
          body: JSON.parse(body) as Record<string, unknown>,
          signatureValid: verifySignature(
            secret,
            String(req.headers["forelead-signature"] ?? ""),
            body,
          ),
          at: Date.now(),
        });
        res.statusCode = scripts.get(path)?.shift() ?? 200;
        res.end();
      });
    });
  let server = make();
  const listen = (port: number) =>
    new Promise<number>((resolve, reject) => {
      server.once("error", reject);
      server.listen(port, "127.0.0.1", () => resolve((server.address() as AddressInfo).port));
    });
  const port = await listen(0);
  const stop = () =>
    new Promise<void>((resolve) => {
      server.close(() => resolve());
      server.closeAllConnections();
    });
  return {
    ca,
    port,
    url: (path) => `https://127.0.0.1:${port}${path}`,
    received: (path) => [...(byPath.get(path) ?? [])],
    script: (path, statuses) => void scripts.set(path, [...statuses]),
    stop,
    async start() {
      server = make();
      await listen(port);
    },
    close: stop,
  };
}
