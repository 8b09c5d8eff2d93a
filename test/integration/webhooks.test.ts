// Webhooks (docs/webhooks.md): each event a subscription wants is POSTed once,
// signed, in event order, with the event's body as the event stream shows it;
// 5xx and refused connections are retried with growing delays for the retry
// window, then the delivery fails and redelivers by id; a subscription that
// keeps failing is disabled with a webhook.disabled event; destinations on
// loopback, private and link-local addresses are refused without
// --webhook-allow-private; bad input is a 400 naming the field; the secret is
// in no view, log or audit record; two replicas send each delivery once.
import { randomBytes } from "node:crypto";
import { writeFile } from "node:fs/promises";
import { join } from "node:path";
import { lookup } from "node:dns/promises";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import type { RestClient } from "../support/clients.js";
import { adminActor, eventually, registeredRunner } from "../support/actors.js";
import { useCliDir } from "../support/cli-dir.js";
import { databaseKind } from "../support/database.js";
import { useControlPlane, useReplicaPair } from "../support/fixture.js";
import { startWebhookReceiver, type WebhookReceiver } from "../support/webhook-receiver.js";

const secret = `whsec-${randomBytes(16).toString("hex")}`;
let receiver: WebhookReceiver;
const logged: string[] = [];
beforeAll(async () => {
  receiver = await startWebhookReceiver(secret);
  for (const method of ["log", "error", "warn", "info"] as const) {
    const original = console[method].bind(console);
    vi.spyOn(console, method).mockImplementation((...args: unknown[]) => {
      logged.push(args.map(String).join(" "));
      original(...args);
    });
  }
});
afterAll(async () => {
  vi.restoreAllMocks();
  await receiver.close();
});

/** Retries in milliseconds, so the whole window fits a test. */
const fast = () => ({
  allowPrivate: true,
  ca: [receiver.ca.certPem],
  backoffMs: 100,
  maxBackoffMs: 400,
  retryWindowMs: 8_000,
  pollMs: 50,
  timeoutMs: 2_000,
  disableAfter: 2,
});
const cp = useControlPlane(() => ({ webhooks: fast() }));
const { admin } = cp;

/** Host names the guarded plane resolves to addresses it must refuse. */
const names: Record<string, string> = {
  "metadata.test": "169.254.169.254",
  "internal.test": "10.1.2.3",
};
const guarded = useControlPlane({
  webhooks: {
    pollMs: 50,
    resolve: async (host) =>
      names[host] ? [{ address: names[host], family: 4 }] : lookup(host, { all: true }),
  },
});

const cli = useCliDir(guarded, "webhooks");

interface DeliveryJson {
  id: string;
  eventId: string;
  eventType: string;
  status: string;
  attempts: number;
  responseCode?: number;
  lastError?: string;
  tries: { at: string; responseCode?: number; error?: string }[];
}

const createHook = (rest: RestClient, body: Record<string, unknown>) =>
  rest.request("POST", "/v1/admin/webhooks", { apiVersion: "v1", secret, ...body });

async function deliveries(rest: RestClient, id: string): Promise<DeliveryJson[]> {
  const reply = await rest.request("GET", `/v1/admin/webhooks/${id}/deliveries?apiVersion=v1`);
  expect(reply.status, reply.text).toBe(200);
  return (reply.json.deliveries ?? []) as DeliveryJson[];
}

/** Waits until the subscription's log has `n` deliveries, none pending. */
const settled = (rest: RestClient, id: string, n: number) =>
  eventually(`${n} finished deliveries of ${id}`, async () => {
    const log = await deliveries(rest, id);
    return log.length === n && log.every((d) => d.status !== "pending") ? log : undefined;
  });

async function events(rest: RestClient, query: string): Promise<Record<string, unknown>[]> {
  const reply = await rest.request("GET", `/v1/admin/events?${query}`);
  expect(reply.status, reply.text).toBe(200);
  return reply.text
    .split("\n")
    .filter(Boolean)
    .map((l) => JSON.parse(l) as Record<string, unknown>);
}

const hookIds: string[] = [];
/** What views, logs and commands printed: the secret must be in none. */
const texts: string[] = [];
async function subscribe(rest: RestClient, body: Record<string, unknown>): Promise<string> {
  const reply = await createHook(rest, body);
  expect(reply.status, reply.text).toBe(200);
  hookIds.push(reply.json.webhook.id as string);
  return reply.json.webhook.id as string;
}

describe(`webhooks (${databaseKind})`, () => {
  it("each settled job's event arrives once, signed, in order, as the event stream shows it", async () => {
    const w = "wh-settled";
    const id = await subscribe(admin.rest, {
      workspaceId: w,
      url: receiver.url("/settled"),
      events: ["job.settled"],
    });
    const runner = await registeredRunner(cp, "r-settled", w);
    for (let i = 0; i < 3; i++) {
      const job = (await admin.enqueue({ workspaceId: w })).json.job.id as string;
      const lease = await runner.claim();
      expect((await runner.complete(job, lease.json.token)).status).toBe(200);
    }
    const log = await settled(admin.rest, id, 3);
    expect(log.map((d) => [d.status, d.attempts, d.responseCode])).toEqual(
      Array(3).fill(["delivered", 1, 200]),
    );
    const got = receiver.received("/settled");
    expect(got).toHaveLength(3);
    expect(got.every((g) => g.signatureValid && g.eventType === "job.settled")).toBe(true);
    expect(new Set(got.map((g) => g.deliveryId))).toEqual(new Set(log.map((d) => d.id)));
    expect(got.map((g) => g.body)).toEqual(
      await events(admin.rest, `workspaceId=${w}`).then((all) =>
        all.filter((e) => e.type === "job.settled"),
      ),
    );
    await runner.close();
  });

  it("a receiver answering 500 three times gets the delivery on the fourth try, after growing delays", async () => {
    const w = "wh-flaky";
    receiver.script("/flaky", [500, 500, 500]);
    const id = await subscribe(admin.rest, {
      workspaceId: w,
      url: receiver.url("/flaky"),
      events: ["job.*"],
    });
    expect((await admin.enqueue({ workspaceId: w })).status).toBe(200);
    const [d] = await settled(admin.rest, id, 1);
    expect(d!.status).toBe("delivered");
    expect(d!.attempts).toBe(4);
    expect(d!.tries.map((t) => t.responseCode)).toEqual([500, 500, 500, 200]);
    const got = receiver.received("/flaky");
    expect(got.map((g) => g.deliveryId)).toEqual(Array(4).fill(d!.id));
    // Each retry waits at least half its doubled delay (equal jitter): 50, 100, 200 ms.
    const gaps = got.slice(1).map((g, i) => g.at - got[i]!.at);
    gaps.forEach((gap, i) => expect(gap).toBeGreaterThanOrEqual(50 * 2 ** i));
  });

  it("a receiver down for the retry window ends in a failed delivery that redelivers by id", async () => {
    const w = "wh-down";
    const id = await subscribe(admin.rest, {
      workspaceId: w,
      url: receiver.url("/down"),
      events: ["job.queued"],
    });
    await receiver.stop();
    try {
      expect((await admin.enqueue({ workspaceId: w })).status).toBe(200);
      const [failed] = await settled(admin.rest, id, 1);
      expect(failed!.status).toBe("failed");
      expect(failed!.attempts).toBeGreaterThan(1);
      expect(failed!.lastError).toMatch(/ECONNREFUSED/);
    } finally {
      await receiver.start();
    }
    const [failed] = await deliveries(admin.rest, id);
    const again = await admin.rest.request(
      "POST",
      `/v1/admin/webhook-deliveries/${failed!.id}/redeliver`,
      { apiVersion: "v1" },
    );
    expect(again.status, again.text).toBe(200);
    expect(again.json.delivery.status).toBe("pending");
    const [done] = await settled(admin.rest, id, 1);
    expect(done!.status).toBe("delivered");
    expect(receiver.received("/down").map((g) => g.deliveryId)).toEqual([failed!.id]);
    const twice = await admin.rest.request("POST", "/v1/admin/webhook-deliveries/x/redeliver", {
      apiVersion: "v1",
    });
    expect(twice.status).toBe(400);
    expect(twice.json.message).toMatch(/deliveryId "x" is not a webhook delivery id/);
  });

  it("a subscription whose deliveries keep failing is disabled, with a webhook.disabled event", async () => {
    const w = "wh-gone";
    receiver.script("/gone", [410, 410]);
    const id = await subscribe(admin.rest, {
      workspaceId: w,
      url: receiver.url("/gone"),
      events: ["job.queued"],
    });
    for (let i = 0; i < 2; i++) expect((await admin.enqueue({ workspaceId: w })).status).toBe(200);
    const log = await settled(admin.rest, id, 2);
    // A 4xx is the receiver's answer: not retried.
    expect(log.map((d) => [d.status, d.attempts, d.responseCode])).toEqual([
      ["failed", 1, 410],
      ["failed", 1, 410],
    ]);
    const hook = (await admin.rest.request("GET", `/v1/admin/webhooks/${id}?apiVersion=v1`)).json
      .webhook;
    expect(hook.enabled ?? false).toBe(false);
    expect(hook.disabledReason).toBe("2 deliveries failed in a row");
    const disabled = await events(admin.rest, `workspaceId=${w}&types=webhook.disabled`);
    expect(disabled.map((e) => (e.data as Record<string, unknown>).subscriptionId)).toEqual([id]);
    // Disabled: a new event makes no delivery.
    expect((await admin.enqueue({ workspaceId: w })).status).toBe(200);
    expect(await deliveries(admin.rest, id)).toHaveLength(2);
  });

  it("without --webhook-allow-private, loopback, private and metadata destinations are refused at delivery", async () => {
    const rest = guarded.admin.rest;
    const w = "wh-ssrf";
    const http = await createHook(rest, {
      workspaceId: w,
      url: `http://127.0.0.1:${receiver.port}/ssrf`,
      events: ["job.queued"],
    });
    expect(http.status).toBe(400);
    expect(http.json.message).toMatch(/^url must be https/);
    const ids = [];
    for (const url of [
      receiver.url("/ssrf"),
      "https://metadata.test/latest/meta-data/",
      "https://internal.test/hook",
    ])
      ids.push(await subscribe(rest, { workspaceId: w, url, events: ["job.queued"] }));
    expect((await guarded.admin.enqueue({ workspaceId: w })).status).toBe(200);
    const errors = [];
    for (const id of ids) {
      const [d] = await settled(rest, id, 1);
      expect([d!.status, d!.attempts]).toEqual(["failed", 1]);
      errors.push(d!.lastError);
    }
    expect(errors).toEqual([
      "refused: 127.0.0.1 resolves to 127.0.0.1, a loopback address; webhooks reach only " +
        "public addresses unless forelead serve --webhook-allow-private",
      expect.stringMatching(/^refused: metadata.test resolves to 169.254.169.254, a link-local/),
      expect.stringMatching(/^refused: internal.test resolves to 10.1.2.3, a private address/),
    ]);
    expect(receiver.received("/ssrf")).toEqual([]);
  });

  it("bad input is a 400 naming the field, and nothing is stored", async () => {
    const rest = guarded.admin.rest;
    const w = "wh-bad";
    const cases: [Record<string, unknown>, RegExp][] = [
      [{ url: "http://example.com/hook" }, /^url must be https/],
      [{ url: "ftp://example.com/hook" }, /^url must be https, not ftp/],
      [{ url: "https://user:pw@example.com/hook" }, /^url must not carry a user name/],
      [{ secret: "short-secret" }, /^secret must be at least 16 bytes; it has 12$/],
      [{ events: ["job.exploded"] }, /^events\[0\] "job.exploded" is not an event type/],
      [{ events: ["nope.*"] }, /^events\[0\] "nope.\*" is not an event type/],
      [{ events: [] }, /^events must name at least one event type/],
    ];
    for (const [override, message] of cases) {
      const reply = await createHook(rest, {
        workspaceId: w,
        url: "https://example.com/hook",
        events: ["job.settled"],
        ...override,
      });
      expect(reply.status, JSON.stringify(override)).toBe(400);
      expect(reply.json.code).toBe("invalid_argument");
      expect(reply.json.message).toMatch(message);
    }
    const list = await rest.request("GET", `/v1/admin/webhooks?apiVersion=v1&workspaceId=${w}`);
    expect(list.json.webhooks ?? []).toEqual([]);
  });

  it("forelead webhooks creates, lists, shows, logs and deletes a subscription", async () => {
    await writeFile(join(cli.dir(), "secret"), `${secret}\n`);
    const run = async (...args: string[]) => {
      const r = await cli.forel(["webhooks", ...args, ...cli.connection()]);
      expect(r.code, r.stderr).toBe(0);
      texts.push(r.stdout, r.stderr);
      return r.stdout;
    };
    const created = await run(
      "create",
      "https://hooks.example.com/cli",
      "--workspace",
      "wh-cli",
      "--event",
      "job.settled",
      "--event",
      "pipeline.*",
      "--secret-file",
      "secret",
    );
    const id =
      /^(\S+) https:\/\/hooks\.example\.com\/cli wh-cli job\.settled,pipeline\.\* enabled$/m.exec(
        created,
      )?.[1];
    expect(id, created).toBeDefined();
    expect(await run("list", "--workspace", "wh-cli")).toBe(created);
    expect(JSON.parse(await run("get", id!, "--json")).webhook.id).toBe(id);
    expect(await run("deliveries", id!)).toBe("no deliveries\n");
    expect(await run("delete", id!)).toMatch(/\(deleted\)$/m);
    expect(await run("list", "--workspace", "wh-cli")).toBe("no webhooks\n");
  });

  it("the secret is in no view, delivery log, audit record or log line, and is stored sealed", async () => {
    for (const [rest, path] of [
      [admin.rest, "/v1/admin/webhooks?apiVersion=v1"],
      [guarded.admin.rest, "/v1/admin/webhooks?apiVersion=v1"],
    ] as const)
      texts.push((await rest.request("GET", path)).text);
    for (const id of hookIds) {
      for (const rest of [admin.rest, guarded.admin.rest]) {
        texts.push((await rest.request("GET", `/v1/admin/webhooks/${id}?apiVersion=v1`)).text);
        texts.push(
          (await rest.request("GET", `/v1/admin/webhooks/${id}/deliveries?apiVersion=v1`)).text,
        );
      }
    }
    expect(texts.join("\n")).toContain(hookIds[0]);
    for (const plane of [cp.plane, guarded.plane]) {
      const audit = await plane.store.db.selectFrom("audit_records").selectAll().execute();
      texts.push(JSON.stringify(audit));
      const rows = await plane.store.db
        .selectFrom("webhook_subscriptions")
        .select("secret_sealed")
        .execute();
      expect(rows.length).toBeGreaterThan(0);
      for (const r of rows) expect(Buffer.from(r.secret_sealed).includes(secret)).toBe(false);
    }
    expect(texts.join("\n")).toMatch(/webhook\.create/);
    texts.push(...logged);
    expect(texts.join("\n")).not.toContain(secret);
  });
});

describe.runIf(databaseKind === "postgres")("webhooks across two replicas", () => {
  const pair = useReplicaPair({
    get webhooks() {
      return fast();
    },
  });

  it("two replicas on one database send each event once, in order", async () => {
    const w = "wh-replicas";
    const [a, b] = [await adminActor(pair.a), await adminActor(pair.b)];
    const reply = await createHook(a.rest, {
      workspaceId: w,
      url: receiver.url("/replicas"),
      events: ["job.queued"],
    });
    expect(reply.status, reply.text).toBe(200);
    const id = reply.json.webhook.id as string;
    const n = 40;
    await Promise.all(
      Array.from({ length: n }, (_, i) => (i % 2 ? a : b).enqueue({ workspaceId: w })),
    );
    await settled(a.rest, id, n);
    const got = receiver.received("/replicas");
    expect(got).toHaveLength(n);
    expect(new Set(got.map((g) => g.deliveryId)).size).toBe(n);
    const ids = got.map((g) => Number(g.body.id));
    expect(ids).toEqual([...ids].sort((x, y) => x - y));
    await a.close();
    await b.close();
  });
});
