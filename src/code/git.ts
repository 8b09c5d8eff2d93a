import { execFile, spawn } from "node:child_process";
import { createWriteStream } from "node:fs";

/** How one git command runs. */
export interface GitRunOptions {
  /** The repository (git -C); omitted for commands that need none. */
  readonly cwd?: string;
  /** Added to the environment: credential plumbing, identities. */
  readonly env?: Readonly<Record<string, string>>;
  /** Killed after this long; gitTimeouts.network by default. */
  readonly timeoutMs?: number;
  /** Strings that must never appear in an error: replaced by "***". */
  readonly secrets?: readonly string[];
  /** Exit codes that are answers, not failures (e.g. 1 of merge-base --is-ancestor). */
  readonly okExitCodes?: readonly number[];
}

/** A git command that failed; its text is already stripped of every secret. */
export class GitError extends Error {
  /** git was killed at its time limit. */
  readonly timedOut: boolean;
  constructor(
    message: string,
    /** git's stderr, redacted, trimmed. */
    readonly stderr: string,
    /** The exit code, or undefined when git was killed (timeout) or did not start. */
    readonly exitCode: number | undefined,
  ) {
    super(message);
    this.name = "GitError";
    this.timedOut = / timed out after /.test(message);
  }
}

/** The result of a git command. */
export interface GitResult {
  readonly stdout: string;
  /** Redacted. */
  readonly stderr: string;
  readonly exitCode: number;
}

const defaultTimeoutMs = 600_000;

/**
 * The environment of every git child: no terminal prompts (a missing
 * credential fails instead of hanging), only the transports the control
 * plane allows (no ext::, no plain http), stable English messages.
 */
function gitEnv(extra: Readonly<Record<string, string>> = {}): NodeJS.ProcessEnv {
  return {
    ...process.env,
    GIT_TERMINAL_PROMPT: "0",
    GIT_ALLOW_PROTOCOL: "file:https:ssh",
    LC_ALL: "C",
    GIT_OPTIONAL_LOCKS: "0",
    ...extra,
  };
}

/**
 * Options before the subcommand on every call: no credential helper (a
 * configured `store` helper would write the credential to disk), no
 * automatic gc or maintenance (pinned commits must stay in the mirror), and
 * fetched objects kept as packs, never exploded into loose objects: a bundle
 * then copies packed data instead of compressing every object again
 * (measured: a 300 MiB fetch of few large blobs went loose, and bundling it
 * took over 120 s on this 2-core machine under load).
 */
const globalArgs = [
  "-c",
  "credential.helper=",
  "-c",
  "gc.auto=0",
  "-c",
  "maintenance.auto=false",
  "-c",
  "transfer.unpackLimit=1",
] as const;

/**
 * Time limits by kind of work. They stop hung processes, not slow ones:
 * network work and whole-repository work (bundles of up to 256 MiB) get
 * minutes, small local queries one minute.
 */
export const gitTimeouts = { local: 60_000, network: 600_000, bulk: 600_000 } as const;

/** Runs git with an argv array (never a shell); throws GitError on failure or timeout. */
export function runGit(args: readonly string[], options: GitRunOptions = {}): Promise<GitResult> {
  const argv = [...globalArgs, ...(options.cwd ? ["-C", options.cwd] : []), ...args];
  return new Promise((resolve, reject) => {
    execFile(
      "git",
      argv,
      {
        env: gitEnv(options.env),
        timeout: options.timeoutMs ?? defaultTimeoutMs,
        maxBuffer: 16 * 1024 * 1024,
        encoding: "utf8",
      },
      (err, stdout, stderr) => {
        const code = err ? (typeof err.code === "number" ? err.code : undefined) : 0;
        if (code === 0 || (code !== undefined && options.okExitCodes?.includes(code)))
          return resolve({
            stdout,
            stderr: redact(stderr, options.secrets).trim(),
            exitCode: code,
          });
        reject(
          gitError(
            args,
            stderr,
            code,
            err?.killed ? (options.timeoutMs ?? defaultTimeoutMs) : undefined,
            options.secrets,
          ),
        );
      },
    );
  });
}

/** Raised by gitToFile when the output passes its byte cap; git is killed at that point. */
export class OutputTooLarge extends Error {
  constructor(readonly maxBytes: number) {
    super(`output is over ${maxBytes} bytes`);
    this.name = "OutputTooLarge";
  }
}

/**
 * Runs git and writes its stdout to `file`, counting bytes: past `maxBytes`
 * git is killed and OutputTooLarge thrown, so an oversized bundle costs at
 * most `maxBytes` of disk and never reaches a client. Resolves to the size.
 */
export function gitToFile(
  args: readonly string[],
  file: string,
  maxBytes: number,
  options: GitRunOptions = {},
): Promise<number> {
  const argv = [...globalArgs, ...(options.cwd ? ["-C", options.cwd] : []), ...args];
  return new Promise((resolve, reject) => {
    const child = spawn("git", argv, {
      env: gitEnv(options.env),
      stdio: ["ignore", "pipe", "pipe"],
    });
    const out = createWriteStream(file, { mode: 0o600 });
    let bytes = 0;
    let stderr = "";
    let failure: Error | undefined;
    const timer = setTimeout(
      () =>
        fail(
          gitError(args, stderr, undefined, options.timeoutMs ?? defaultTimeoutMs, options.secrets),
        ),
      options.timeoutMs ?? defaultTimeoutMs,
    );
    function fail(err: Error) {
      failure ??= err;
      child.kill("SIGKILL");
    }
    child.stderr
      .setEncoding("utf8")
      .on("data", (d: string) => (stderr = (stderr + d).slice(-8192)));
    child.stdout.on("data", (chunk: Buffer) => {
      bytes += chunk.length;
      if (bytes > maxBytes) return fail(new OutputTooLarge(maxBytes));
      if (!out.write(chunk)) {
        child.stdout.pause();
        out.once("drain", () => child.stdout.resume());
      }
    });
    child.on("error", (err) => fail(err));
    // The file can fail too (a full disk, a directory gone): an 'error' with no listener would end
    // the process.
    out.on("error", (err) => fail(err));
    child.on("close", (code) => {
      clearTimeout(timer);
      out.end((err?: Error | null) => {
        // A failed write can reach here before the 'error' listener above hears of it: as this
        // callback's error, or, when the file was destroyed by it before end(), as the stream's own
        // (err is then "cannot call end").
        const written = out.errored ?? err;
        if (written) failure ??= written;
        if (failure) return reject(failure);
        if (code !== 0)
          return reject(gitError(args, stderr, code ?? undefined, undefined, options.secrets));
        resolve(bytes);
      });
    });
  });
}

/** Replaces every secret (and its URL-encoded form) in `text` with "***". */
function redact(text: string, secrets: readonly string[] = []): string {
  let out = text;
  for (const s of secrets) {
    if (!s) continue;
    for (const form of new Set([s, encodeURIComponent(s), s.trim()]))
      if (form) out = out.split(form).join("***");
  }
  return out;
}

function gitError(
  args: readonly string[],
  stderr: string,
  exitCode: number | undefined,
  timedOutAfterMs: number | undefined,
  secrets: readonly string[] = [],
): GitError {
  const clean = redact(stderr, secrets).trim();
  // The subcommand only: argv may hold a URL, and URLs are an operator's business, not a runner's.
  const what = `git ${args.find((a) => !a.startsWith("-")) ?? ""}`.trim();
  const why =
    timedOutAfterMs !== undefined
      ? `timed out after ${Math.round(timedOutAfterMs / 1000)} s`
      : `exited ${exitCode ?? "abnormally"}`;
  return new GitError(`${what} ${why}${clean ? `: ${lastLines(clean)}` : ""}`, clean, exitCode);
}

/**
 * What git said went wrong: its `fatal:` and `error:` lines when there are
 * any (advice such as "Please make sure you have the correct access rights"
 * follows them and names no cause), else its last few lines.
 */
function lastLines(text: string): string {
  const lines = text
    .split("\n")
    .map((l) => l.trim())
    .filter(Boolean);
  const causes = lines.filter((l) => /^(fatal|error):/.test(l));
  return (causes.length > 0 ? causes.slice(0, 3) : lines.slice(-3)).join(" / ").slice(0, 600);
}
