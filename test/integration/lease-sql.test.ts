// The lease rules of src/broker/leases/sql-fragments.ts, evaluated by the database on
// rows shaped like jobs and leases rows: every lease statement guards with
// these, so the boundaries (token, state, expiry at exactly now()) are
// checked here once.
import { sql } from "kysely";
import { describe, expect, it } from "vitest";
import {
  expiredLease,
  leaseHeld,
  liveLease,
  liveLeaseRow,
} from "../../src/broker/leases/sql-fragments.js";
import { databaseKind } from "../support/database.js";
import { useTestStore } from "../support/store.js";

const store = useTestStore();

const token = Buffer.alloc(32, 1);
const otherToken = Buffer.alloc(32, 2);

describe(`lease rules (${databaseKind})`, () => {
  it(
    "a lease is live while its job runs under that token and before its " +
      "expiry; expiredLease is exactly the other running rows",
    async () => {
      const { rows } = await sql<{ name: string; held: boolean; live: boolean; expired: boolean }>`
      select j.name, ${leaseHeld({ token }, "j")} as held, ${liveLease({ token }, "j")} as
        live, ${expiredLease("j")} as expired
      from (values
        ('running, its token, expiring later', 'running', ${token}::bytea, now() + interval '1 minute'),
        ('running, its token, expiring now', 'running', ${token}::bytea, now()),
        ('running, its token, expired', 'running', ${token}::bytea, now() - interval '1 minute'),
        ('running, another token', 'running', ${otherToken}::bytea, now() + interval '1 minute'),
        ('queued', 'queued', null::bytea, null::timestamptz)
      ) as j(name, state, lease_token_sha256, lease_expires_at)`.execute(store().db);
      const byName = Object.fromEntries(rows.map((r) => [r.name, [r.held, r.live, r.expired]]));
      expect(byName).toEqual({
        "running, its token, expiring later": [true, true, false],
        "running, its token, expiring now": [true, false, true],
        "running, its token, expired": [true, false, true],
        "running, another token": [false, false, false],
        queued: [false, false, false],
      });
    },
  );

  it("a lease row is live until it ends or expires", async () => {
    const { rows } = await sql<{ name: string; live: boolean }>`
      select l.name, ${liveLeaseRow("l")} as live
      from (values
        ('open, expiring later', null::timestamptz, now() + interval '1 minute'),
        ('ended, expiring later', now(), now() + interval '1 minute'),
        ('open, expired', null::timestamptz, now())
      ) as l(name, ended_at, expires_at)`.execute(store().db);
    expect(Object.fromEntries(rows.map((r) => [r.name, r.live]))).toEqual({
      "open, expiring later": true,
      "ended, expiring later": false,
      "open, expired": false,
    });
  });

  it("a match narrows by every field it names, a value as a parameter and a reference inlined", async () => {
    const { rows } = await sql<{ id: string; live: boolean }>`
      select j.id, ${liveLease({ jobId: sql.ref("j.wanted"), workspaceId: "w1", runnerId: "r1", leaseId: 7 }, "j")} as
        live
      from (values
        ('a', 'a', 'w1', 'r1', 7, 'running', now() + interval '1 minute'),
        ('b', 'x', 'w1', 'r1', 7, 'running', now() + interval '1 minute'),
        ('c', 'c', 'w2', 'r1', 7, 'running', now() + interval '1 minute'),
        ('d', 'd', 'w1', 'r2', 7, 'running', now() + interval '1 minute'),
        ('e', 'e', 'w1', 'r1', 8, 'running', now() + interval '1 minute')
      ) as j(id, wanted, workspace_id, runner_id, lease_id, state, lease_expires_at)`.execute(
      store().db,
    );
    expect(Object.fromEntries(rows.map((r) => [r.id, r.live]))).toEqual({
      a: true,
      b: false,
      c: false,
      d: false,
      e: false,
    });
  });
});
