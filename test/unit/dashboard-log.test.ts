import { Code, ConnectError } from "@connectrpc/connect";
import { describe, expect, it } from "vitest";
import { createAnsiReader } from "../../src/dashboard/web/job/ansi.js";
import { follow, type FollowState } from "../../src/dashboard/web/job/follow.js";
import { createLogLines } from "../../src/dashboard/web/job/log-lines.js";

interface Entry {
  readonly position: string;
  readonly text: string;
}

/** A log server's stored entries: each open reads from `after` on, like GetJobLogs with follow. */
function server(entries: Entry[]) {
  const opened: string[] = [];
  return {
    opened,
    /**
     * Opens from `after`; the stream breaks after `dropAfter` entries (a lost connection), or ends.
     */
    open(
      dropAfter: number | undefined,
      error: unknown = new ConnectError("connection lost", Code.Unavailable),
    ) {
      return async function* (after: string): AsyncIterable<Entry> {
        opened.push(after);
        const start = after === "" ? 0 : entries.findIndex((e) => e.position === after) + 1;
        let sent = 0;
        for (const e of entries.slice(start)) {
          if (dropAfter !== undefined && sent === dropAfter) throw error;
          sent += 1;
          yield e;
        }
        if (dropAfter !== undefined && sent === dropAfter) throw error;
      };
    },
  };
}

const entries = Array.from({ length: 7 }, (_, i) => ({
  position: `1.${i + 1}`,
  text: `line ${i + 1}\n`,
}));
const noWait = () => Promise.resolve();

describe("the log follower", () => {
  it(
    "resumes after a dropped connection from the last entry it delivered, " +
      "with no line twice and none lost",
    async () => {
      const s = server(entries);
      const opens = [s.open(3), s.open(0), s.open(2), s.open(undefined)];
      const got: string[] = [];
      const states: FollowState["kind"][] = [];
      const f = follow({
        open: (after) => opens.shift()!(after),
        cursor: (e) => e.position,
        onEntry: (e) => got.push(e.text),
        onState: (st) => states.push(st.kind),
        wait: noWait,
      });
      expect((await f.done).kind).toBe("ended");
      expect(got).toEqual(entries.map((e) => e.text));
      // Each reconnect starts after the last delivered entry; the one that drops before any keeps it.
      expect(s.opened).toEqual(["", "1.3", "1.3", "1.5"]);
      expect(f.after()).toBe("1.7");
      expect(states).toEqual([
        "live",
        "reconnecting",
        "reconnecting",
        "live",
        "reconnecting",
        "live",
        "ended",
      ]);
    },
  );

  it("backs off more with each consecutive failure and starts over once entries flow again", async () => {
    const s = server(entries);
    const opens = [s.open(0), s.open(0), s.open(1), s.open(0), s.open(undefined)];
    const waits: number[] = [];
    const f = follow({
      open: (after) => opens.shift()!(after),
      cursor: (e) => e.position,
      onEntry: () => {},
      wait: (ms) => (waits.push(ms), Promise.resolve()),
    });
    await f.done;
    expect(waits).toEqual([500, 1000, 500, 1000]);
  });

  it("starts from a given cursor", async () => {
    const s = server(entries);
    const got: string[] = [];
    const f = follow({
      open: s.open(undefined),
      cursor: (e) => e.position,
      onEntry: (e) => got.push(e.position),
      after: "1.5",
      wait: noWait,
    });
    await f.done;
    expect(got).toEqual(["1.6", "1.7"]);
  });

  it("stops at an error no retry mends (the role is missing) and says so", async () => {
    const s = server(entries);
    const refused = new ConnectError("identity lacks the read role", Code.PermissionDenied);
    const f = follow({
      open: s.open(0, refused),
      cursor: (e) => e.position,
      onEntry: () => {},
      wait: noWait,
    });
    const end = await f.done;
    expect(end.kind).toBe("failed");
    expect(end.kind === "failed" && end.error.code).toBe(Code.PermissionDenied);
    expect(s.opened).toEqual([""]);
  });

  it("stop() ends a follower waiting to reconnect", async () => {
    const s = server(entries);
    const f: ReturnType<typeof follow<Entry>> = follow({
      open: s.open(0),
      cursor: (e) => e.position,
      onEntry: () => {},
      onState: (st) => {
        if (st.kind === "reconnecting") f.stop();
      },
    });
    expect((await f.done).kind).toBe("stopped");
  });
});

describe("log lines", () => {
  it("joins chunks split mid-line per stream and attempt, and splits chunks holding several lines", () => {
    const log = createLogLines();
    log.push({ attempt: 1, data: "comp" });
    log.push({ attempt: 1, data: { stream: "stderr", text: "warning: x" } });
    log.push({ attempt: 1, data: "iling\nlinking\nte" });
    log.push({ attempt: 1, data: "sts\n" });
    log.push({ attempt: 2, data: "again\n" });
    expect(log.lines().map((l) => [l.attempt, l.stream, l.text, l.complete])).toEqual([
      [1, "stdout", "compiling", true],
      [1, "stderr", "warning: x", true],
      [1, "stdout", "linking", true],
      [1, "stdout", "tests", true],
      [2, "stdout", "again", true],
    ]);
  });

  it("keeps a colour across lines and chunks of one stream, and an escape split across chunks", () => {
    const log = createLogLines();
    log.push({ attempt: 1, data: "\u001b[3" });
    log.push({ attempt: 1, data: "1mred\nstill red\u001b[0m plain\n" });
    const [first, second] = log.lines();
    expect(first!.segments).toEqual([{ text: "red", classes: ["ansi-red-fg"], style: {} }]);
    expect(second!.segments).toEqual([
      { text: "still red", classes: ["ansi-red-fg"], style: {} },
      { text: " plain", classes: [], style: {} },
    ]);
  });
});

describe("ANSI text, rendered safely", () => {
  it("keeps a hostile line as text: no element, attribute or script comes out of it", () => {
    const hostile =
      `<img src=x onerror="alert(1)"> </span><script>alert('x')</script> &amp; ` +
      `\u001b[1;32m"><b>ok</b>\u001b[0m`;
    const segments = createAnsiReader().segments(hostile);
    // What a person would read is exactly the line without its escape sequences.
    expect(segments.map((s) => s.text).join("")).toBe(
      `<img src=x onerror="alert(1)"> </span><script>alert('x')</script> &amp; "><b>ok</b>`,
    );
    const bold = segments.find((s) => s.text.includes("<b>ok</b>"))!;
    expect(bold.classes).toEqual(["ansi-green-fg"]);
    expect(bold.style).toEqual({ fontWeight: "bold" });
    for (const s of segments) expect(s.href).toBeUndefined();
  });

  it("links only http and https targets of OSC 8 links", () => {
    const r = createAnsiReader();
    const link = (url: string, text: string) => `\u001b]8;;${url}\u001b\\${text}\u001b]8;;\u001b\\`;
    expect(r.segments(link('https://example.com/a?b=1&c="2"', "docs"))).toEqual([
      { text: "docs", classes: [], style: {}, href: 'https://example.com/a?b=1&c="2"' },
    ]);
    expect(r.segments(link("javascript:alert(1)", "click")).filter((s) => s.href)).toEqual([]);
  });

  it("passes 256 and true colours as checked style values", () => {
    const segments = createAnsiReader().segments(
      "\u001b[38;2;10;20;30mtrue\u001b[0m \u001b[48;5;196mbg\u001b[0m",
    );
    expect(segments[0]).toEqual({ text: "true", classes: [], style: { color: "rgb(10,20,30)" } });
    expect(segments[2]!.style).toEqual({
      backgroundColor: expect.stringMatching(/^rgb\(\d+,\d+,\d+\)$/),
    });
  });
});
