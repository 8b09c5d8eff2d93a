import type { Lease } from "../../../gen/forelead/runner/v1/job_pb.js";
import { looksSecret } from "../../protocol/secret-names.js";

/** What every masked secret value becomes. */
const maskText = "***";

/**
 * Shortest value of a secret-looking spec.env variable, and of one line of a
 * multi-line secret, that is masked: shorter ones (KEY_ID=1, a blank line of a
 * PEM file) would mask ordinary text everywhere and hide nothing worth hiding.
 * The job's declared secrets (the lease's `secrets` and `secretFiles`) are
 * masked whatever their length: they were declared secret.
 */
const minHeuristicLength = 4;

/** One stream of a job's output (stdout or stderr), masked as it goes. */
export interface MaskingStream {
  /**
   * Takes the next piece of the stream; returns the text that is final, masked. A tail that could
   * still become a secret value is held back.
   */
  write(text: string): string;
  /** The end of the stream: the held tail, masked. */
  end(): string;
}

/** Masks a job's secret values in everything the runner sends about the job. */
export interface SecretMasker {
  /**
   * A matcher for one output stream; it carries its state across writes, chunk boundaries and line
   * breaks.
   */
  stream(): MaskingStream;
  /** `text` as a whole, masked (an error message, a log line of the runner). */
  text(text: string): string;
  /** Every string inside a JSON-like value (an event), masked. */
  value<T>(value: T): T;
  /**
   * Masks `values` too from now on, everywhere this masker masks (its open streams included): a
   * value the job is given while it runs, such as an ID token (add its maskedForms).
   */
  add(values: Iterable<string>): void;
}

/**
 * A masker of `values`: every occurrence of any of them is replaced with
 * "***". Occurrences that overlap or touch are one masked stretch, so two
 * overlapping secrets leave no piece of either. A stream holds back only
 * the longest tail of what it was given that is a proper prefix of some
 * value (it may still become one), releases the rest at once, and never
 * sends a prefix of a value unmasked. It works on decoded text (the
 * executors' streams decode UTF-8 before it, keeping characters split over
 * reads whole), so a value is matched however the bytes were cut.
 *
 * The scan lets the regular-expression engine find the positions where a
 * value's first two characters occur and tries there the values that start
 * with that character, longest first: about 80 MB/s of ordinary log text
 * with 20 random tokens and a key file on one core here; at worst (output
 * that repeats a long value's prefix) output × value length.
 */
export function createSecretMasker(values: Iterable<string>): SecretMasker {
  // The values by their first character, longest first; and a pattern of their first two
  // characters, with which the engine's own search skips the positions where none begins.
  const all = new Set<string>();
  let byFirst = new Map<string, string[]>();
  let starts = /$^/g;
  const index = (more: Iterable<string>) => {
    for (const v of more) if (v.length > 0) all.add(v);
    byFirst = new Map();
    for (const v of all) {
      const list = byFirst.get(v[0]!) ?? [];
      list.push(v);
      byFirst.set(v[0]!, list);
    }
    for (const list of byFirst.values()) list.sort((a, b) => b.length - a.length);
    const heads = new Map<string, Set<string>>();
    for (const v of all) heads.set(v[0]!, (heads.get(v[0]!) ?? new Set()).add(v.slice(1, 2)));
    const escape = (c: string) => `\\u${c.charCodeAt(0).toString(16).padStart(4, "0")}`;
    // first[seconds] per first character; a one-character value's first character alone.
    starts = new RegExp(
      [...heads]
        .map(([first, seconds]) =>
          seconds.has("")
            ? escape(first)
            : `${escape(first)}[${[...seconds].map(escape).join("")}]`,
        )
        .join("|"),
      "g",
    );
  };
  index(values);

  /**
   * Masks `buf`, whose first `covered` characters belong to a stretch whose
   * "***" was already sent. Returns the final text and what to hold: the
   * rest from the first position where a value may still begin, and how
   * much of that rest is already covered.
   */
  const scan = (buf: string, covered: number, final: boolean) => {
    // Nothing to mask (yet): the text as it is, at no cost.
    if (byFirst.size === 0) return { out: buf, rest: "", covered: 0 };
    let hold = buf.length;
    const found: Array<[number, number]> = covered > 0 ? [[0, covered]] : [];
    // The positions where a value may begin: the pattern's matches, and the last position (one
    // character, a prefix of any value beginning with it).
    const positions = function* () {
      starts.lastIndex = 0;
      for (let m = starts.exec(buf); m; m = starts.exec(buf)) {
        yield m.index;
        starts.lastIndex = m.index + 1;
      }
      if (buf.length > 0) yield buf.length - 1;
    };
    outer: for (const i of positions()) {
      const candidates = byFirst.get(buf[i]!);
      if (!candidates) continue;
      for (const v of candidates) {
        if (buf.startsWith(v, i)) {
          found.push([i, i + v.length]); // the longest at i; shorter ones at i lie inside it
          break;
        }
        if (!final && buf.length - i < v.length && v.startsWith(buf.slice(i))) {
          hold = i; // the first possible start: nothing from here on is final yet
          break outer;
        }
      }
    }
    let out = "";
    let pos = 0;
    let stillCovered = Math.max(0, covered - hold);
    for (const [a, b] of merged(found)) {
      if (a >= hold) break;
      out += buf.slice(pos, a);
      // a stretch going on from the last write was sent already
      if (!(a === 0 && covered > 0)) out += maskText;
      pos = Math.min(b, hold);
      if (b > hold) stillCovered = b - hold;
    }
    out += buf.slice(pos, hold);
    return { out, rest: buf.slice(hold), covered: stillCovered };
  };

  const text = (t: string) => scan(t, 0, true).out;
  const value = (v: unknown): unknown => {
    if (typeof v === "string") return text(v);
    if (Array.isArray(v)) return v.map(value);
    if (v !== null && typeof v === "object")
      return Object.fromEntries(Object.entries(v).map(([k, x]) => [text(k), value(x)]));
    return v;
  };
  return {
    stream() {
      let rest = "";
      let covered = 0;
      return {
        write(t) {
          const r = scan(rest + t, covered, false);
          rest = r.rest;
          covered = r.covered;
          return r.out;
        },
        end() {
          const r = scan(rest, covered, true);
          rest = "";
          covered = 0;
          return r.out;
        },
      };
    },
    text,
    value: <T>(v: T) => value(v) as T,
    add: index,
  };
}

/** Sorted, overlapping or touching stretches joined. */
function merged(stretches: ReadonlyArray<[number, number]>): Array<[number, number]> {
  const out: Array<[number, number]> = [];
  for (const [a, b] of stretches) {
    const last = out.at(-1);
    if (last && a <= last[1]) last[1] = Math.max(last[1], b);
    else out.push([a, b]);
  }
  return out;
}

/**
 * The values to mask for a lease: its secrets and secret file contents
 * (each also without its final line break, and each line of a multi-line
 * one, as a job may print a key file line by line), and the values of
 * spec.env variables whose names look secret (looksSecret).
 */
export function leaseSecretValues(lease: Pick<Lease, "secrets" | "secretFiles" | "job">): string[] {
  const values: string[] = [];
  for (const v of [...Object.values(lease.secrets), ...Object.values(lease.secretFiles)]) {
    values.push(v);
    const trimmed = v.replace(/(\r?\n)+$/, "");
    if (trimmed !== v) values.push(trimmed);
    if (/[\r\n]/.test(trimmed))
      values.push(
        ...trimmed.split(/\r?\n/).filter((line) => line.trim().length >= minHeuristicLength),
      );
  }
  for (const [name, v] of Object.entries(lease.job?.spec?.env ?? {})) {
    if (looksSecret(name) && v.length >= minHeuristicLength) values.push(v);
  }
  return [...new Set(values.flatMap(maskedForms))];
}

/**
 * `value` and the encoded forms a job is likely to print it in (encodedForms): what a masker is
 * given for one secret. A value under minEncodedLength is masked as it is only: its encoded forms
 * would match ordinary text.
 */
export function maskedForms(value: string): string[] {
  return value.length >= minEncodedLength ? [value, ...encodedForms(value)] : [value];
}

/**
 * Shortest encoded form that is masked: a base64 or percent-encoded stretch shorter than this
 * would match ordinary text.
 */
const minEncodedLength = 8;

/**
 * The forms a job is likely to print a secret in besides the raw value: JSON-escaped as
 * JavaScript, Go or Python write it (quotes, backslashes and control characters escaped; with
 * `ensure_ascii`, every non-ASCII character as `\uXXXX`, in lower or upper case; with `/` as
 * `\/`), percent-encoded (`encodeURIComponent`, and `+` for spaces as forms write it) and base64
 * (standard and URL-safe, of the value alone and of its middle wherever it falls in a longer
 * encoded text: each of the three alignments without its uncertain edges).
 */
function encodedForms(value: string): string[] {
  const forms = new Set<string>();
  const json = JSON.stringify(value).slice(1, -1);
  const ascii = json.replace(
    /[\u007f-\uffff]/g,
    (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, "0")}`,
  );
  for (const f of [
    json,
    ascii,
    ascii.replace(/\\u([0-9a-f]{4})/g, (_, h: string) => `\\u${h.toUpperCase()}`),
  ]) {
    forms.add(f);
    forms.add(f.replaceAll("/", "\\/"));
  }
  const percent = encodeURIComponent(value);
  forms.add(percent);
  forms.add(percent.replaceAll("%20", "+"));
  const bytes = Buffer.from(value, "utf8");
  for (let shift = 0; shift < 3; shift++) {
    const b64 = Buffer.concat([Buffer.alloc(shift), bytes]).toString("base64");
    // The characters that hold only the value's bits: past the shift's, before the last group's.
    const first = shift === 0 ? 0 : shift === 1 ? 2 : 3;
    const whole = (shift + bytes.length) % 3 === 0;
    const end = whole ? b64.length : b64.length - 4 + ((shift + bytes.length) % 3);
    const middle = shift === 0 && whole ? b64 : b64.slice(first, end);
    for (const f of [shift === 0 ? b64 : "", middle]) {
      if (f.length < minEncodedLength) continue;
      forms.add(f);
      forms.add(f.replaceAll("+", "-").replaceAll("/", "_").replace(/=+$/, ""));
    }
  }
  forms.delete(value);
  return [...forms].filter((f) => f.length >= minEncodedLength);
}
