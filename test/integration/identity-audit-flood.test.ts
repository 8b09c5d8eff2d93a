import { afterAll, describe, expect, it } from "vitest";
import { createRestClient } from "../support/clients.js";
import { databaseKind } from "../support/database.js";
import { useControlPlane } from "../support/fixture.js";

// Issue 15, "audit that cannot be flooded": 5 s of certificate-less requests
// from one address, on several connections and routes (REST paths holding
// ids the client picks), become a bounded number of audit rows whose counts
// add up to the requests refused; the administrator's allowed requests made
// meanwhile stay one record each.

const cp = useControlPlane();
const noCertificate = /^no client certificate was presented/;
const floodMs = 5000;

interface Rec {
  id: string;
  at: string;
  route: string;
  decision: string;
  reason: string;
  count: number;
  firstAt: string;
  lastAt: string;
  remoteAddress?: string;
  spiffeId?: string;
}

let refused = 0;
let allowedByAdmin = 0;
let trail: Rec[] = [];

async function readTrail(): Promise<Rec[]> {
  const out: Rec[] = [];
  let pageToken = "";
  do {
    const page = await cp.admin.rest.request(
      "GET",
      `/v1/admin/audit?pageSize=1000${pageToken ? `&pageToken=${pageToken}` : ""}`,
    );
    expect(page.status, page.text).toBe(200);
    out.push(...(page.json.records ?? []));
    pageToken = page.json.nextPageToken ?? "";
  } while (pageToken);
  return out;
}

afterAll(() => {
  console.log(
    `audit flood (${databaseKind}): ${refused} certificate-less requests ` +
      `refused in ${floodMs} ms, ` +
      `${trail.filter((r) => noCertificate.test(r.reason)).length} audit rows`,
  );
});

describe(`an audit flood (${databaseKind})`, () => {
  it(
    "5 s of certificate-less requests write a bounded number of rows whose " +
      "counts add up to the requests refused",
    async () => {
      // A connection without a client certificate may hold only a few streams at once
      // (--max-streams-without-certificate, 4): 8 connections × 4.
      const clients = Array.from({ length: 8 }, () => createRestClient(cp.url, cp.pki.ca.certPem));
      const started = Date.now();
      const until = started + floodMs;
      let n = 0;
      const flood = async (client: (typeof clients)[number]) => {
        while (Date.now() < until) {
          const i = n++;
          const reply =
            i % 2
              ? await client.request("POST", "/v1/runner/claim", {
                  apiVersion: "v1",
                  runnerId: "r1",
                })
              : await client.request("GET", `/v1/admin/jobs/flood-${i}`);
          expect(reply.status).toBe(401);
          refused++;
        }
      };
      const admin = async () => {
        while (Date.now() < until) {
          expect(
            (await cp.admin.rest.request("GET", "/v1/admin/runners?workspaceId=w1")).status,
          ).toBe(200);
          allowedByAdmin++;
          await new Promise((r) => setTimeout(r, 100));
        }
      };
      await Promise.all([
        ...clients.flatMap((c) => Array.from({ length: 4 }, () => flood(c))),
        admin(),
      ]);
      // The requests in flight at `until` end after it: the bound counts the intervals the flood
      // really lasted.
      const floodSeconds = Math.ceil((Date.now() - started) / 1000);
      await Promise.all(clients.map((c) => c.close()));
      trail = await readTrail();

      const rows = trail.filter((r) => noCertificate.test(r.reason));
      // a flood, not a trickle (about 1,000 on two busy shared cores)
      expect(refused).toBeGreaterThan(200);
      expect(rows.length * 10).toBeLessThan(refused);
      // At most two rows per interval of 1 s (the first refusal at once, then its repeats), plus the
      // interval a read closes.
      expect(rows.length).toBeLessThanOrEqual(2 * (floodSeconds + 2));
      expect(rows.reduce((sum, r) => sum + r.count, 0)).toBe(refused);
      expect(new Set(rows.map((r) => r.remoteAddress)).size).toBe(1);
    },
    30_000,
  );

  it("an aggregated record shows its count, first and last time on the read route", () => {
    const aggregated = trail.filter((r) => noCertificate.test(r.reason) && r.count > 1);
    expect(aggregated.length).toBeGreaterThan(0);
    for (const r of aggregated) {
      expect(r.firstAt).toBe(r.at);
      expect(Date.parse(r.lastAt)).toBeGreaterThanOrEqual(Date.parse(r.firstAt));
      // one interval at most
      expect(Date.parse(r.lastAt) - Date.parse(r.firstAt)).toBeLessThan(1000);
    }
  });

  it("allowed decisions stay one record each, with count 1 and first = last = at", () => {
    const allowed = trail.filter(
      (r) => r.decision === "allow" && r.route === "GET /v1/admin/runners",
    );
    expect(allowed).toHaveLength(allowedByAdmin);
    for (const r of allowed) expect(r).toMatchObject({ count: 1, firstAt: r.at, lastAt: r.at });
  });
});
