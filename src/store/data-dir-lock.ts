// One process per directory: the embedded database's data directory and a
// runner's state directory are each locked by a lock file inside them.
//
// The lock file (`forelead.lock`, 0644) holds {pid, startedAt, hostname,
// command} as JSON and is created with O_EXCL, so of two processes starting
// at once exactly one creates it. A lock file already there is held when its
// process is alive: same hostname, process.kill(pid, 0) succeeds, and the
// process's own start time (from /proc on Linux) matches the recorded one
// within a second, so a reused pid is not mistaken for the holder. Otherwise
// it is stale (the holder was SIGKILLed or the machine rebooted): it is
// removed and the lock taken again, once. A lock recorded by another host
// cannot be checked from here and is always refused. The lock is released by
// close() and, as a last resort, when the process exits; a crash leaves a
// stale file, which the next start detects.
//
// Known gap: two processes that both find the same stale file in the same
// instant may both remove it; the O_EXCL create still lets only one of them
// write the new file, but the other may then remove that new file in its
// "stale" step. It needs a crash and two starts within microseconds.
import { closeSync, mkdirSync, openSync, readFileSync, rmSync, writeSync } from "node:fs";
import { hostname } from "node:os";
import { join } from "node:path";

/** The lock file's name inside a locked directory. */
export const lockFileName = "forelead.lock";

/** What a lock file records about its holder. */
export interface LockHolder {
  readonly pid: number;
  /** When the holding process started (ISO 8601). */
  readonly startedAt: string;
  readonly hostname: string;
  /** What holds it, e.g. "forelead serve". */
  readonly command: string;
}

/** A held directory lock. */
export interface DirectoryLock {
  readonly file: string;
  /** Removes the lock file (only if it is still this process's). Idempotent. */
  close(): void;
}

/** Raised when another live process holds the directory. */
export class DirectoryInUse extends Error {
  constructor(
    readonly dir: string,
    readonly holder: LockHolder,
    hint: string,
  ) {
    super(
      `${dir} is in use by ${holder.command} (pid ` +
        `${holder.pid}${holder.hostname !== hostname() ? ` on ${holder.hostname}` : ""}, ` +
        `started ${holder.startedAt}); ${hint}`,
    );
    this.name = "DirectoryInUse";
  }
}

/**
 * Files this process holds: a lock recorded with our own pid but not here is stale (pid reuse after
 * a restart).
 */
const held = new Set<string>();
/**
 * Measured the way holderAlive measures others, so the two compare; from uptime where /proc is
 * missing.
 */
const ownStart = new Date(processStartTime(process.pid) ?? Date.now() - process.uptime() * 1000);

/**
 * Locks `dir` (created if missing) for `command`, or throws DirectoryInUse
 * naming the live holder; `hint` says what to do instead ("stop it or use
 * another --database"). Synchronous, so nothing else runs between the check
 * and the create.
 */
export function lockDirectory(dir: string, command: string, hint: string): DirectoryLock {
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  const file = join(dir, lockFileName);
  const me: LockHolder = {
    pid: process.pid,
    startedAt: ownStart.toISOString(),
    hostname: hostname(),
    command,
  };
  for (let attempt = 0; ; attempt++) {
    if (tryCreate(file, me)) break;
    const holder = readHolder(file);
    if (holder === "gone") continue; // released between our create and our read
    if (holder !== "unreadable" && holderAlive(holder, file))
      throw new DirectoryInUse(dir, holder, hint);
    if (attempt > 0)
      throw new Error(
        `cannot lock ${dir}: ${file} keeps coming back; remove it if no forelead process uses ${dir}`,
      );
    rmSync(file, { force: true });
  }
  held.add(file);
  let released = false;
  const release = () => {
    if (released) return;
    released = true;
    held.delete(file);
    process.off("exit", release);
    const current = readHolder(file);
    if (typeof current === "object" && current.pid === me.pid && current.startedAt === me.startedAt)
      rmSync(file, { force: true });
  };
  process.on("exit", release);
  return { file, close: release };
}

function tryCreate(file: string, me: LockHolder): boolean {
  let fd: number;
  try {
    fd = openSync(file, "wx", 0o644);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === "EEXIST") return false;
    throw new Error(`cannot lock ${file}: ${(err as Error).message}`);
  }
  try {
    writeSync(fd, `${JSON.stringify(me)}\n`);
  } finally {
    closeSync(fd);
  }
  return true;
}

function readHolder(file: string): LockHolder | "gone" | "unreadable" {
  let text: string;
  try {
    text = readFileSync(file, "utf8");
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === "ENOENT") return "gone";
    throw new Error(`cannot read the lock file ${file}: ${(err as Error).message}`);
  }
  try {
    const h = JSON.parse(text) as LockHolder;
    return Number.isSafeInteger(h.pid) &&
      typeof h.startedAt === "string" &&
      typeof h.hostname === "string"
      ? h
      : "unreadable";
  } catch {
    return "unreadable"; // a holder killed between create and write: nobody can hold it like that
  }
}

/** Whether the recorded process is the one running now. */
function holderAlive(holder: LockHolder, file: string): boolean {
  if (holder.hostname !== hostname()) return true; // cannot be checked from here: never steal it
  if (holder.pid === process.pid) return held.has(file);
  try {
    process.kill(holder.pid, 0);
  } catch (err) {
    // EPERM: a live process of another user.
    if ((err as NodeJS.ErrnoException).code !== "EPERM") return false;
  }
  const started = processStartTime(holder.pid);
  return started === undefined || Math.abs(started - Date.parse(holder.startedAt)) < 1_000;
}

/**
 * A process's start time on Linux (/proc/PID/stat field 22, clock ticks since
 * boot, plus the boot time from /proc/stat); undefined elsewhere, where the
 * pid alone decides. USER_HZ is 100 on every Linux ABI Node runs on.
 */
function processStartTime(pid: number): number | undefined {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
    const ticks = Number(fields[19]);
    const boot = Number(/^btime (\d+)$/m.exec(readFileSync("/proc/stat", "utf8"))?.[1]);
    return Number.isFinite(ticks) && Number.isFinite(boot) ? boot * 1000 + ticks * 10 : undefined;
  } catch {
    return undefined;
  }
}
