import { mkdtemp, readFile, rm, stat } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { createSessionStore } from "../../src/dashboard/server/sessions.js";
import { createSignInToken } from "../../src/dashboard/server/sign-in-token.js";

const person = { id: "spiffe://forelead/services/ops", via: "sign-in token" };

describe("dashboard sessions", () => {
  it("a session lives while used within its idle time, and never past its absolute lifetime", () => {
    let t = 1_000_000;
    const store = createSessionStore({ idleMs: 100, maxMs: 250 }, () => t);
    const { cookieValue, session } = store.createSession(person);
    expect(cookieValue).toMatch(/^[A-Za-z0-9_-]{43}$/);
    expect(session.csrfToken).toMatch(/^[A-Za-z0-9_-]{43}$/);
    expect(session.csrfToken).not.toBe(cookieValue);
    expect(store.expiresAt(session)).toBe(t + 100);
    t += 99;
    expect(store.lookup(cookieValue)?.person).toEqual(person);
    t += 99;
    expect(store.lookup(cookieValue)).toBeDefined();
    // Used every 99 ms, it still ends 250 ms after sign-in.
    expect(store.expiresAt(session)).toBe(1_000_000 + 250);
    t = 1_000_000 + 250;
    expect(store.lookup(cookieValue)).toBeUndefined();
    // Ended is ended: the clock going back does not revive it.
    t = 1_000_000;
    expect(store.lookup(cookieValue)).toBeUndefined();
  });

  it("an idle session ends; sign-out ends one at once; an unknown cookie finds nothing", () => {
    let t = 0;
    const store = createSessionStore({ idleMs: 100, maxMs: 10_000 }, () => t);
    const a = store.createSession(person);
    const b = store.createSession(person);
    expect(a.cookieValue).not.toBe(b.cookieValue);
    t = 100;
    expect(store.lookup(a.cookieValue)).toBeUndefined();
    const c = store.createSession(person);
    store.end(c.cookieValue);
    expect(store.lookup(c.cookieValue)).toBeUndefined();
    expect(store.lookup("")).toBeUndefined();
    expect(store.lookup(b.cookieValue.slice(1))).toBeUndefined();
  });
});

describe("the one-time sign-in token", () => {
  it("is written 0600, works once even when posted twice at the same moment, and is replaced", async () => {
    const dir = await mkdtemp(join(tmpdir(), "forelead-token-"));
    try {
      const shown: string[] = [];
      const token = await createSignInToken(join(dir, "state", "d.token"), (t) => shown.push(t));
      const first = (await readFile(token.file, "utf8")).trim();
      expect(shown).toEqual([first]);
      expect((await stat(token.file)).mode & 0o777).toBe(0o600);
      expect((await stat(join(dir, "state"))).mode & 0o777).toBe(0o700);
      expect(await token.redeem("wrong")).toBe(false);
      const wins = await Promise.all([token.redeem(first), token.redeem(first)]);
      expect(wins.sort()).toEqual([false, true]);
      const second = (await readFile(token.file, "utf8")).trim();
      expect(second).not.toBe(first);
      expect(shown).toEqual([first, second]);
      expect(await token.redeem(first)).toBe(false);
      await token.remove();
      await expect(stat(token.file)).rejects.toThrow(/ENOENT/);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});
