// Summarizes a V8 .cpuprofile (node --cpu-prof) the way docs/performance.md reads them:
//
//   node --import tsx bench/lib/profile-summary.ts FILE [--from S] [--to S] [--view V] [--match TEXT] [--top N]
//
// --from/--to: only samples in that window, in seconds from the profile's start (`--view timeline`
// shows the main thread's busy share per second, to find the window of a run). Views:
//   categories  self time by where the code lives: a package, a folder of src/, a Node internal
//   src         inclusive time of each of our functions (src/), idle left out
//   via         samples inside code whose URL contains --match (e.g. node_modules/kysely), each
//               charged to the nearest of our functions above it
//   functions   inclusive and self time of the functions whose URL contains --match
//   timeline    busy % of each second
// Percentages are of the busy (non-idle) time in the window.
import { readFileSync } from "node:fs";
import { parseArgs } from "node:util";

interface CallFrame {
  readonly functionName: string;
  readonly url: string;
  readonly lineNumber: number;
}
interface ProfileNode {
  readonly id: number;
  readonly callFrame: CallFrame;
  readonly children?: readonly number[];
}
interface Profile {
  readonly nodes: readonly ProfileNode[];
  readonly startTime: number;
  readonly endTime: number;
  readonly samples: readonly number[];
  readonly timeDeltas: readonly number[];
}

const { positionals, values } = parseArgs({
  allowPositionals: true,
  options: {
    from: { type: "string" },
    to: { type: "string" },
    view: { type: "string" },
    match: { type: "string" },
    top: { type: "string" },
  },
});
const file = positionals[0];
if (!file)
  throw new Error(
    "usage: profile-summary.ts FILE [--from S] [--to S] [--view " +
      "categories|src|via|functions|timeline] [--match TEXT] [--top N]",
  );
const profile = JSON.parse(readFileSync(file, "utf8")) as Profile;
const fromUs = Number(values.from ?? 0) * 1e6;
const toUs = Number(values.to ?? Infinity) * 1e6;
const view = values.view ?? "categories";
const match = values.match ?? "";
const top = Number(values.top ?? 40);
if ((view === "via" || view === "functions") && !match)
  throw new Error(`--view ${view} needs --match TEXT (part of a URL)`);

const byId = new Map(profile.nodes.map((n) => [n.id, n]));
const parentOf = new Map<number, number>();
for (const n of profile.nodes) for (const c of n.children ?? []) parentOf.set(c, n.id);

/** The frames of a sample, leaf first. */
function* stack(id: number): Generator<ProfileNode> {
  for (let at: number | undefined = id; at !== undefined; at = parentOf.get(at))
    yield byId.get(at)!;
}

function category(f: CallFrame): string {
  if (!f.url) return f.functionName.startsWith("(") ? f.functionName : `native ${f.functionName}`;
  if (f.url.startsWith("node:")) return f.url;
  const pkg = /node_modules\/((?:@[^/]+\/)?[^/]+)/.exec(f.url);
  if (pkg) return `package ${pkg[1]}`;
  const own = /\/(src|bench|gen)\/(.*)$/.exec(f.url);
  if (own)
    return own[1] === "src"
      ? `src/${own[2]!.split("/").slice(0, -1).join("/") || own[2]}`
      : `${own[1]}/`;
  return f.url;
}

const ours = (f: CallFrame) => f.url.includes("/src/");
const label = (f: CallFrame) =>
  `${f.functionName || "(anonymous)"} ${f.url.replace(/^.*\/(src|node_modules)\//, "")}:${f.lineNumber + 1}`;

const self = new Map<string, number>();
const inclusive = new Map<string, number>();
const perSecond = new Map<number, number>();
const add = (m: Map<string, number>, k: string, us: number) => m.set(k, (m.get(k) ?? 0) + us);
let busy = 0;
let t = profile.startTime;
for (let i = 0; i < profile.samples.length; i++) {
  t += profile.timeDeltas[i]!;
  const at = t - profile.startTime;
  const us = profile.timeDeltas[i + 1] ?? 0;
  const leaf = byId.get(profile.samples[i]!)!;
  if (leaf.callFrame.functionName === "(idle)") continue;
  perSecond.set(Math.floor(at / 1e6), (perSecond.get(Math.floor(at / 1e6)) ?? 0) + us);
  if (at < fromUs || at > toUs) continue;
  busy += us;
  if (view === "categories") add(self, category(leaf.callFrame), us);
  else if (view === "src") {
    const seen = new Set<string>();
    for (const n of stack(leaf.id)) if (ours(n.callFrame)) seen.add(label(n.callFrame));
    for (const k of seen) add(inclusive, k, us);
  } else if (view === "via") {
    let inside = false;
    let charged = "(no function of ours above it)";
    for (const n of stack(leaf.id)) {
      if (n.callFrame.url.includes(match)) inside = true;
      else if (inside && ours(n.callFrame)) {
        charged = label(n.callFrame);
        break;
      }
    }
    if (inside) add(inclusive, charged, us);
  } else if (view === "functions") {
    const seen = new Set<string>();
    for (const n of stack(leaf.id))
      if (n.callFrame.url.includes(match)) seen.add(label(n.callFrame));
    for (const k of seen) add(inclusive, k, us);
    if (leaf.callFrame.url.includes(match)) add(self, label(leaf.callFrame), us);
  }
}

const ms = (us: number) => (us / 1000).toFixed(0).padStart(7);
const pct = (us: number) => `${((100 * us) / Math.max(busy, 1)).toFixed(1).padStart(5)} %`;
const print = (title: string, m: Map<string, number>) => {
  console.log(`== ${title}`);
  for (const [k, us] of [...m].sort((a, b) => b[1] - a[1]).slice(0, top))
    console.log(`${ms(us)} ms ${pct(us)}  ${k}`);
};

if (view === "timeline") {
  console.log(
    [...perSecond]
      .sort((a, b) => a[0] - b[0])
      .map(([s, us]) => `${s}s:${Math.round(us / 1e4)}%`)
      .join(" "),
  );
} else {
  console.log(`${file}: ${ms(busy).trim()} ms busy in the window`);
  if (view === "categories") print("self time by category", self);
  else if (view === "src") print("inclusive time of our functions", inclusive);
  else if (view === "via")
    print(`time inside ${match}, by the function of ours that called it`, inclusive);
  else if (view === "functions") {
    print(`inclusive time of functions in ${match}`, inclusive);
    print(`self time of functions in ${match}`, self);
  } else throw new Error(`--view ${view}: one of categories, src, via, functions, timeline`);
}
