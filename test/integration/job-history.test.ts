import "reflect-metadata";
import { beforeAll, describe, expect, it } from "vitest";
import { registeredRunner } from "../support/actors.js";
import { databaseKind } from "../support/database.js";
import { useControlPlane } from "../support/fixture.js";

const cp = useControlPlane();
const { admin } = cp;
const ws = "hist";
const hour = 3_600_000;

/** j[0] is the oldest job (created 7 h before `base`), j[6] the newest (1 h before). */
const j: string[] = [];
let base = 0;

beforeAll(async () => {
  const h1 = await registeredRunner(cp, "h1", ws, { labels: ["linux", "gpu"], slots: 5 });
  const h2 = await registeredRunner(cp, "h2", ws, { labels: ["linux"], slots: 5 });
  const labels = [
    ["linux"],
    ["linux"],
    ["linux"],
    ["linux", "gpu"],
    ["linux", "gpu"],
    ["linux"],
    ["linux"],
  ];
  for (const l of labels) {
    const reply = await admin.enqueue({ workspaceId: ws, labels: l });
    expect(reply.status, reply.text).toBe(200);
    j.push(reply.json.job.id);
  }
  base = Date.now();
  for (const [i, id] of j.entries()) {
    await cp.plane.store.db
      .updateTable("jobs")
      .set({ created_at: new Date(base - (7 - i) * hour) })
      .where("id", "=", id)
      .execute();
  }
  // The claim takes the oldest job a runner's labels fit: h2 gets j0, h1 gets j1 then j2.
  const claimed = async (runner: typeof h1, expected: string) => {
    const reply = await runner.claim();
    expect(reply.status, reply.text).toBe(200);
    expect(reply.json.job.id).toBe(expected);
    return reply.json.token as string;
  };
  const t0 = await claimed(h2, j[0]!);
  expect((await h2.complete(j[0]!, t0)).status).toBe(200);
  const t1 = await claimed(h1, j[1]!);
  expect(
    (
      await h1.complete(j[1]!, t1, {
        outcome: "failed",
        exitCode: 1,
        error: { code: "exit_code", message: "exit 1", retryable: false },
      })
    ).status,
  ).toBe(200);
  await claimed(h1, j[2]!);
  expect((await admin.cancel(j[6]!)).status).toBe(200);
});

/** Every page of the listing with `query`, `pageSize` at a time: the ids in order. */
async function list(query: string, pageSize = 50): Promise<string[]> {
  const ids: string[] = [];
  let token = "";
  do {
    const reply = await admin.rest.request(
      "GET",
      `/v1/admin/jobs?workspaceId=${ws}&pageSize=${pageSize}&${query}${token ? `&pageToken=${token}` : ""}`,
    );
    expect(reply.status, reply.text).toBe(200);
    ids.push(...(reply.json.jobs ?? []).map((x: { id: string }) => x.id));
    token = reply.json.nextPageToken ?? "";
  } while (token);
  return ids;
}

const pick = (...indexes: number[]) => indexes.map((i) => j[i]);

describe(`job history: ListJobs filters and orders (${databaseKind})`, () => {
  it("lists newest first by default and oldest first with order=oldest", async () => {
    expect(await list("")).toEqual(pick(6, 5, 4, 3, 2, 1, 0));
    expect(await list("order=newest")).toEqual(pick(6, 5, 4, 3, 2, 1, 0));
    expect(await list("order=oldest")).toEqual(pick(0, 1, 2, 3, 4, 5, 6));
  });

  it("pages in both orders: every job once, in order, across pages of 2", async () => {
    expect(await list("", 2)).toEqual(pick(6, 5, 4, 3, 2, 1, 0));
    expect(await list("order=oldest", 2)).toEqual(pick(0, 1, 2, 3, 4, 5, 6));
    // the queue as it is claimed
    expect(await list("order=oldest&states=queued", 2)).toEqual(pick(3, 4, 5));
    expect(await list("labels=linux", 3)).toEqual(pick(6, 5, 4, 3, 2, 1, 0));
  });

  it("since and until bound the creation time in each accepted form", async () => {
    expect(await list(`since=270m&until=${new Date(base - 2.5 * hour).toISOString()}`)).toEqual(
      pick(4, 3),
    );
    expect(await list(`since=${Math.floor((base - 5.5 * hour) / 1000)}`)).toEqual(
      pick(6, 5, 4, 3, 2),
    );
    expect(await list("until=6h&order=oldest")).toEqual(pick(0, 1));
    expect(await list("since=1d")).toHaveLength(7);
  });

  it("states takes several states; the old state parameter still works and adds to them", async () => {
    expect(await list("states=queued&states=cancelled")).toEqual(pick(6, 5, 4, 3));
    expect(await list("state=succeeded")).toEqual(pick(0));
    expect(await list("state=running&states=failed")).toEqual(pick(2, 1));
  });

  it("labels lists jobs whose labels include all of them", async () => {
    expect(await list("labels=gpu")).toEqual(pick(4, 3));
    expect(await list("labels=linux&labels=gpu&order=oldest")).toEqual(pick(3, 4));
    expect(await list("labels=windows")).toEqual([]);
  });

  it("runnerId lists the jobs a lease of that runner held, settled or running", async () => {
    expect(await list("runnerId=h1")).toEqual(pick(2, 1));
    expect(await list("runnerId=h2")).toEqual(pick(0));
    expect(await list("runnerId=h1&states=failed")).toEqual(pick(1));
  });

  it("refuses a bad order, state, label or time with 400 naming what is accepted", async () => {
    const cases: Array<[string, RegExp]> = [
      ["order=sideways", /^order "sideways" is not one of newest, oldest$/],
      [
        "states=queued&states=done",
        /^state "done" is not one of queued, running, waiting_input, succeeded, failed, cancelled$/,
      ],
      ["labels=no%20spaces", /^labels\[0\] "no spaces" is not a label/],
      ["since=soon", /^since "soon" is not a time; use RFC 3339 .*"90m".*"30d"/],
      ["since=1h&until=2h", /^until .* is before since/],
    ];
    for (const [query, message] of cases) {
      const reply = await admin.rest.request("GET", `/v1/admin/jobs?${query}`);
      expect(reply.status, query).toBe(400);
      expect(reply.json.message, query).toMatch(message);
    }
  });
});
